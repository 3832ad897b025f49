// Package httpapi is catalogd's HTTP JSON API: the product catalog of package
// catalog served through holdfast.
//
// Reads go through four holdfast namespaces, each with its own policy (see
// DefaultPolicies): product info, stock, list pages and search results. A
// loader reads the catalog.Store and encodes the answer as JSON once; the
// cached bytes are then written to every later response unchanged, so a hit
// costs no encoding at all. GET /v1/products/{id} is two reads, product info
// and stock, spliced into one JSON object without decoding either.
//
// Writes never go through the cache. PUT /v1/products/{id} updates the
// database with a version check and then invalidates the product's key;
// POST /v1/products/{id}/reserve takes stock in the database with optimistic
// locking and then invalidates the stock key.
//
// # What a write invalidates, and how stale the rest may be
//
// Invalidation drops one key from this process's hot tier and last-known-good
// store and from the shared tier (Redis), and Redis announces it to every
// other instance, which drops its own copies as it hears it: within a few
// milliseconds. While an instance cannot hear the announcements (Redis
// frozen or unreachable from it), it serves its hot copies for at most
// Hot.MaxUnheard (15 s) after it last heard them, and never past Hot.TTL or
// the value's soft time; when it hears again, it checks what it holds
// against Redis. Another instance's load that read the old row before the
// write cannot put it into Redis after the invalidation: holdfast writes
// with the key's version read before the load, and the invalidation bumped
// it (tier.Coordinator). The bounds below are for the defaults
// (DefaultPolicies, with -redis).
//
//   - PUT /v1/products/{id} invalidates product info of that id (namespace
//     "product", key "<id>"). The writing instance's next read loads the new
//     value; the others' within milliseconds (at most 15 s while they
//     cannot hear Redis). Without Redis, each instance keeps its copy until
//     its TTL (30 min): run several instances with Redis.
//   - POST /v1/products/{id}/reserve invalidates stock of that id (namespace
//     "stock"), also when the reservation failed for lack of stock. Other
//     instances show the old figure for milliseconds, and for at most the
//     stock SoftTTL (3 s) while they cannot hear Redis. The figure shown is
//     a hint either way: only the database decides whether a reservation
//     succeeds.
//   - Not invalidated, because the keys that hold a product cannot be
//     enumerated (any page of any category and sort, any prefix of its name
//     or code): list pages (namespace "list") may show a product's old name,
//     price, status or category, or still list or omit it, for up to the
//     list TTL (10 min); search results (namespace "search") for up to the
//     search TTL (5 min). An update does not touch stock, nor a reservation
//     product info.
//
// Every bound is from the moment the write commits. While the database is
// failing, the stale-if-error windows extend them (product 30 min, stock
// 5 s, list 10 min, search 10 min past the TTL): an old value is then served
// rather than an error. With nothing to serve, a database that cannot be
// reached is a 503 with Retry-After, as the load limiter's rejection is: the
// request will work again once the database is back. If the Redis delete itself fails (Redis down), the
// write still answers 200, since it committed: holdfast queues the
// invalidation and replays it when Redis recovers, and this instance reads
// the key's Redis copy as a miss meanwhile; another instance may read the old
// value from a recovered Redis until the replay lands (about
// holdfast.Options.ReplayInterval, 500 ms).
//
// Every cached response carries Cache-Status (RFC 9211) saying which tier
// answered and how fresh the value was, and Age, the seconds since the value
// was read from the database. This package is the only one that knows HTTP:
// errorStatus maps the error kinds of catalog and holdfast to status codes
// and to the JSON error bodies clients see.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/internal/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Names of the holdfast namespaces the Handler creates. With a shared tier
// their keys live in Redis as "<name>:<key>".
const (
	NamespaceProduct = "product"
	NamespaceStock   = "stock"
	NamespaceList    = "list"
	NamespaceSearch  = "search"
)

// Limits on request input. They bound the work one request can ask for and
// keep every cache key short.
const (
	// MaxBodyBytes is the largest request body accepted; larger gets 413.
	MaxBodyBytes = 64 << 10
	// MaxQueryBytes bounds the raw query string of any request.
	MaxQueryBytes = 1024
	// MaxSearchQueryBytes bounds the raw q parameter of a search before it
	// is normalized (which then allows catalog.MaxPrefixLen runes).
	MaxSearchQueryBytes = 256
	// maxIDDigits keeps ids within int64 without relying on ParseInt's
	// overflow error, and rejects absurdly long paths early.
	maxIDDigits = 18
)

// Policies holds the policy of each namespace. A policy whose TTL is zero is
// replaced by that namespace's entry in DefaultPolicies, so the zero value
// means the defaults.
type Policies struct {
	Product holdfast.Policy
	Stock   holdfast.Policy
	List    holdfast.Policy
	Search  holdfast.Policy
}

// reservedLoads is the load slots product and stock reads each keep for
// themselves: a product page's miss is one primary-key query of about a
// millisecond, so two slots serve hundreds of misses a second.
const reservedLoads = 2

// DefaultPolicies returns the policies of the product service catalogd is
// modelled on: product info 30 min with a 30 min stale-if-error window;
// stock 5 s, refreshed in the background after 3 s, stale-if-error 5 s; list
// pages 10 min with a 10 min window. Search results follow the list pages'
// windows, with a shorter TTL because a new or renamed product should reach
// autocomplete soon. Every namespace shares its hot keys with the other
// instances through Redis (Hot.Share), so that a product going viral is kept
// in every instance's memory, and smeared, as soon as one of them sees it.
// NewHandler turns Hot.Share off when the Cache's shared tier cannot exchange
// hot keys (no Redis): holdfast refuses such a policy, and each instance then
// finds its hot keys on its own. Product and stock reads each keep
// reservedLoads load slots of their own (Policy.ReservedLoads): search and
// list keys are chosen by clients, so a flood of unique queries can miss
// every time and take every cache-wide slot, and a product page must still
// load then.
func DefaultPolicies() Policies {
	share := holdfast.HotPolicy{Share: true}
	return Policies{
		Product: holdfast.Policy{TTL: 30 * time.Minute, StaleIfError: 30 * time.Minute, Hot: share, ReservedLoads: reservedLoads},
		Stock:   holdfast.Policy{TTL: 5 * time.Second, SoftTTL: 3 * time.Second, StaleIfError: 5 * time.Second, Hot: share, ReservedLoads: reservedLoads},
		List:    holdfast.Policy{TTL: 10 * time.Minute, StaleIfError: 10 * time.Minute, Hot: share},
		Search:  holdfast.Policy{TTL: 5 * time.Minute, StaleIfError: 10 * time.Minute, Hot: share},
	}
}

// withDefaults fills in every namespace whose TTL is zero.
func (p Policies) withDefaults() Policies {
	d := DefaultPolicies()
	for _, f := range []struct{ got, def *holdfast.Policy }{
		{&p.Product, &d.Product}, {&p.Stock, &d.Stock}, {&p.List, &d.List}, {&p.Search, &d.Search},
	} {
		if f.got.TTL == 0 {
			*f.got = *f.def
		}
	}
	return p
}

// namespace creates the namespace name with policy p, without Hot.Share
// when c's shared tier cannot share hot keys (there is none, without
// -redis or in a test): c refuses the policy then, and such a namespace
// shares none.
func namespace(c *holdfast.Cache, name string, p holdfast.Policy) (*holdfast.Namespace, error) {
	ns, err := c.Namespace(name, p)
	if err != nil && p.Hot.Share {
		p.Hot.Share = false
		if ns, err := c.Namespace(name, p); err == nil {
			return ns, nil
		}
	}
	return ns, err
}

// Check is a readiness check reported by /readyz.
type Check struct {
	// Name labels the check in the /readyz body ("redis").
	Name string
	// Required makes a failing check fail readiness (503). A check that is
	// not required is only reported: catalogd serves without Redis.
	Required bool
	// Func returns nil when the dependency is usable.
	Func func(ctx context.Context) error
}

// Config configures a Handler. Store and Cache are required; every other
// field's zero value means the default given beside it.
type Config struct {
	// Store is the catalog database.
	Store catalog.Store
	// Cache is where the Handler creates its four namespaces. The caller
	// owns it and closes it after the server has stopped.
	Cache *holdfast.Cache
	// Policies configures the namespaces. Default DefaultPolicies().
	Policies Policies
	// Clock tells the time for Age and Cache-Status's ttl; it must be the
	// Cache's clock. Default: the system clock.
	Clock holdfast.Clock
	// Logger receives the request log (at debug) and errors (warn for
	// failed invalidations and for 503s, at most one line per 10 s with
	// their counts; error for other 5xx). Default slog.Default().
	Logger *slog.Logger
	// Registry, when set, receives the HTTP and database-pool metrics and is
	// served on /metrics. Default nil: no /metrics endpoint.
	Registry *prometheus.Registry
	// Checks are extra readiness checks. The database is always checked and
	// always required.
	Checks []Check
	// Pprof mounts net/http/pprof under /debug/pprof/ on the Admin handler,
	// never on the API. Default false: the profiles expose internals (the
	// command line, with whatever secrets its flags hold) and cost CPU.
	Pprof bool
	// RetryAfter is the Retry-After sent with a 503. Default 1 s: a load
	// slot frees within one load (milliseconds), and the stock value that
	// expires most often is back in the cache within a second.
	RetryAfter time.Duration
	// SearchLimit is how many products a search returns, clamped by
	// catalog.SearchLimit. Default catalog.DefaultSearchLimit. It is fixed
	// per process so that the normalized prefix alone is the cache key.
	SearchLimit int
	// ReadyTimeout bounds each readiness check. Default 2 s.
	ReadyTimeout time.Duration
	// MaxQueriesInFlight caps the search requests, and apart from them the
	// list-page requests, in flight at once. Their keys are chosen by
	// clients, so a flood of unique queries misses every time. A request
	// past the cap waits up to 10 ms for a place (as a load waits for a
	// slot once the database is saturated), then is answered 503 (code
	// "overloaded", Retry-After) before its query is parsed or the cache
	// asked, so that a flood spends less CPU on work that is refused
	// anyway and leaves more to product and stock reads, which are never
	// capped, nor are writes. Default 0: 8 ×
	// GOMAXPROCS, twice the cache's default load slots, so that every
	// slot can be loading while as many requests again are answered from
	// the cache or wait for a slot. Negative: no cap.
	MaxQueriesInFlight int
}

// Handler serves the catalog API. Create it with NewHandler.
type Handler struct {
	store   catalog.Store
	clock   holdfast.Clock
	log     *slog.Logger
	rejects map[string]*ratelog.Logger // by error code (newRejectLogs)
	checks  []Check

	product, stock, list, search *holdfast.Namespace
	// The loaders are built once: a method value made per request would
	// allocate on the hot path.
	loadProduct, loadStock, loadList, loadSearch holdfast.Loader

	retryAfter   string
	searchLimit  int
	readyTimeout time.Duration
	readyLog     readyLog // why checks fail, for the log only (health.go)
	pprof        bool     // served by Admin (admin.go)

	// searchAdmission and listAdmission cap the requests of those routes
	// in flight (Config.MaxQueriesInFlight).
	searchAdmission, listAdmission *admission

	mux     *http.ServeMux
	metrics *httpMetrics // nil without a Registry
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// NewHandler validates cfg, creates the namespaces on cfg.Cache, registers
// the metrics on cfg.Registry and returns the Handler.
func NewHandler(cfg Config) (*Handler, error) {
	if cfg.Store == nil || cfg.Cache == nil {
		return nil, errors.New("catalogd http: Config.Store and Config.Cache are required")
	}
	if cfg.RetryAfter < 0 || cfg.ReadyTimeout < 0 {
		return nil, fmt.Errorf("catalogd http: negative RetryAfter %v or ReadyTimeout %v", cfg.RetryAfter, cfg.ReadyTimeout)
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{
		store:        cfg.Store,
		clock:        cfg.Clock,
		log:          cfg.Logger,
		rejects:      newRejectLogs(cfg.Logger),
		checks:       cfg.Checks,
		retryAfter:   fmt.Sprint(max(1, int(cfg.RetryAfter.Round(time.Second)/time.Second))),
		searchLimit:  catalog.SearchLimit(cfg.SearchLimit),
		readyTimeout: cfg.ReadyTimeout,
		mux:          http.NewServeMux(),

		searchAdmission: newAdmission(cfg.MaxQueriesInFlight),
		listAdmission:   newAdmission(cfg.MaxQueriesInFlight),
	}
	pol := cfg.Policies.withDefaults()
	// A key limit below the longest key valid input makes would turn valid
	// requests into 400s; refuse it here rather than at the first long
	// category.
	for _, k := range []struct {
		name string
		p    holdfast.Policy
		max  int
	}{{NamespaceList, pol.List, maxListKeyBytes}, {NamespaceSearch, pol.Search, maxSearchKeyBytes}} {
		if k.p.MaxKeyBytes != 0 && k.p.MaxKeyBytes < k.max {
			return nil, fmt.Errorf("catalogd http: %s MaxKeyBytes %d is below the %d bytes its longest valid key takes", k.name, k.p.MaxKeyBytes, k.max)
		}
	}
	var err error
	for _, ns := range []struct {
		dst  **holdfast.Namespace
		name string
		p    holdfast.Policy
	}{
		{&h.product, NamespaceProduct, pol.Product},
		{&h.stock, NamespaceStock, pol.Stock},
		{&h.list, NamespaceList, pol.List},
		{&h.search, NamespaceSearch, pol.Search},
	} {
		if *ns.dst, err = namespace(cfg.Cache, ns.name, ns.p); err != nil {
			return nil, fmt.Errorf("catalogd http: %w", err)
		}
	}
	h.loadProduct = byID(h.store.Product)
	h.loadStock = stockLoader(h.store.Stock)
	h.loadList = h.listLoader
	h.loadSearch = h.searchLoader

	h.mux.HandleFunc("GET /v1/products/{id}", h.getProduct)
	h.mux.HandleFunc("PUT /v1/products/{id}", h.updateProduct)
	h.mux.HandleFunc("POST /v1/products/{id}/reserve", h.reserve)
	h.mux.HandleFunc("GET /v1/products", h.admit(h.listAdmission, h.listProducts))
	h.mux.HandleFunc("GET /v1/search", h.admit(h.searchAdmission, h.searchProducts))
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	// The catch-all turns the mux's plain-text 404 and 405 into JSON errors.
	h.mux.HandleFunc("/", h.unmatched)
	if cfg.Registry != nil {
		if h.metrics, err = newHTTPMetrics(cfg.Registry, cfg.Store); err != nil {
			return nil, fmt.Errorf("catalogd http: %w", err)
		}
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{
			ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		}))
	}
	h.pprof = cfg.Pprof
	return h, nil
}

// ServeHTTP routes the request and records it: the metrics by route pattern
// and status (never by raw path, which would let clients create unbounded
// label values) and, at debug level, one log line.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	if len(r.URL.RawQuery) > MaxQueryBytes {
		h.writeError(sw, r, errorf(http.StatusBadRequest, codeQueryTooLong, "the query string is longer than %d bytes", MaxQueryBytes))
	} else {
		h.mux.ServeHTTP(sw, r)
	}
	// The mux set r.Pattern on this very request; "/" is the catch-all.
	route := r.Pattern
	if route == "" || route == "/" {
		route = "unmatched"
	}
	d := time.Since(start)
	if h.metrics != nil {
		h.metrics.observe(route, sw.status(), d)
	}
	if h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
			slog.Int("status", sw.status()), slog.Int64("bytes", sw.written), slog.Duration("duration", d))
	}
}

// statusWriter remembers the status and size of a response for the metrics
// and the request log.
type statusWriter struct {
	http.ResponseWriter
	code    int
	written int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// Unwrap lets http.ResponseController reach the connection (pprof's
// profile handler extends its write deadline through it).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// unmatched answers requests no route matched: 405 with Allow when the path
// exists for other methods, else 404. It asks the mux itself which methods
// the path has, so the answer can never disagree with the routes.
func (h *Handler) unmatched(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pat := h.mux.Handler(probe); pat != "" && pat != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		h.writeError(w, r, errorf(http.StatusNotFound, codeNoRoute, "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	h.writeError(w, r, errorf(http.StatusMethodNotAllowed, codeMethodNotAllowed, "%s is not allowed on %s", r.Method, r.URL.Path))
}
