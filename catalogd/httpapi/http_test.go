package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
	"github.com/prometheus/client_golang/prometheus"
)

// timeClock reads time.Now on every call, so that inside a synctest bubble
// the cache runs on the bubble's fake time.
type timeClock struct{}

func (timeClock) Now() time.Time { return time.Now() }

var quiet = slog.New(slog.DiscardHandler)

// newInmemTier is a shared tier standing in for Redis; its expiry follows
// time.Now, the bubble's clock under synctest.
func newInmemTier() *inmem.Tier { return inmem.New(nil) }

type setup struct {
	shared   tier.Tier
	maxLoads int
	checks   []httpapi.Check
	policies func(*httpapi.Policies) // adjusts testPolicies
	logger   *slog.Logger            // default quiet
	// maxQueries is Config.MaxQueriesInFlight.
	maxQueries int
}

type env struct {
	t     *testing.T
	h     *httpapi.Handler
	store *fakeStore
	cache *holdfast.Cache
}

// testPolicies are the defaults with a hot tier that lasts as long as the
// values' soft times, so that time-travel tests see the namespaces' own
// windows and not the hot tier's shorter TTL.
func testPolicies() httpapi.Policies {
	p := httpapi.DefaultPolicies()
	for _, pol := range []*holdfast.Policy{&p.Product, &p.Stock, &p.List, &p.Search} {
		pol.Hot.TTL = time.Hour
	}
	return p
}

// withoutReservedLoads makes product and stock reads share the cache-wide
// load limit with the others, for tests of what happens when it is full.
func withoutReservedLoads(p *httpapi.Policies) {
	p.Product.ReservedLoads, p.Stock.ReservedLoads = 0, 0
}

func newEnv(t *testing.T, s setup) *env {
	t.Helper()
	cache, err := holdfast.New(holdfast.Options{Shared: s.shared, MaxConcurrentLoads: s.maxLoads, Clock: timeClock{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	store := newFakeStore()
	pol := testPolicies()
	if s.policies != nil {
		s.policies(&pol)
	}
	logger := s.logger
	if logger == nil {
		logger = quiet
	}
	h, err := httpapi.NewHandler(httpapi.Config{
		Store: store, Cache: cache, Policies: pol, Clock: timeClock{}, Logger: logger,
		Registry: prometheus.NewRegistry(), Checks: s.checks, MaxQueriesInFlight: s.maxQueries,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, h: h, store: store, cache: cache}
}

func (e *env) do(method, target, body string, header ...string) *httptest.ResponseRecorder {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	// Writes need the JSON media type; a test that wants none sends an
	// empty Content-Type.
	if _, ok := req.Header["Content-Type"]; body != "" && !ok {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

func (e *env) get(target string) *httptest.ResponseRecorder { return e.do(http.MethodGet, target, "") }

// refusal is a request the handler must refuse with status and a JSON
// error of the given code.
type refusal struct {
	name, method, target, body string
	header                     []string
	status                     int
	code                       string
}

// refuses sends each request, checks its refusal, and runs the extra checks
// on the response.
func (e *env) refuses(t *testing.T, cases []refusal, checks ...func(*testing.T, *httptest.ResponseRecorder)) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := e.do(c.method, c.target, c.body, c.header...)
			if code := errorCode(t, rec, c.status); code != c.code {
				t.Errorf("code %q, want %q", code, c.code)
			}
			for _, check := range checks {
				check(t, rec)
			}
		})
	}
}

// errorCode checks that rec is a JSON error with the given status and
// returns its code.
func errorCode(t *testing.T, rec *httptest.ResponseRecorder, status int) string {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("error body %q is not {error:{code,message}}: %v", rec.Body, err)
	}
	return body.Error.Code
}

type productBody struct {
	Product catalog.Product `json:"product"`
	Stock   catalog.Stock   `json:"stock"`
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return v
}

func wantCacheStatus(t *testing.T, rec *httptest.ResponseRecorder, want ...string) {
	t.Helper()
	got := rec.Header().Get("Cache-Status")
	members := strings.Split(got, ", ")
	if len(members) != len(want) {
		t.Fatalf("Cache-Status %q has %d members, want %d: %q", got, len(members), len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(members[i], w) {
			t.Errorf("Cache-Status member %d = %q, want prefix %q", i, members[i], w)
		}
	}
}

// TestGetProductMissThenHit: the first read loads both parts from the store
// and says so; the second is served from the hot tier without touching the
// store, with the same bytes.
func TestGetProductMissThenHit(t *testing.T) {
	e := newEnv(t, setup{})
	rec := e.get("/v1/products/1")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	first := rec.Body.String()
	wantCacheStatus(t, rec, `holdfast; fwd=miss; stored; ttl=1799; key="product:1"`, `holdfast; fwd=miss; stored; ttl=2; key="stock:1"`)
	if rec.Header().Get("Age") != "0" {
		t.Errorf("Age %q, want 0", rec.Header().Get("Age"))
	}
	b := decode[productBody](t, rec)
	if b.Product.Name != "Red Kettle" || b.Stock.Available != 10 || b.Stock.ProductID != 1 {
		t.Errorf("body %+v", b)
	}

	rec = e.get("/v1/products/01") // the same key as "1"
	wantCacheStatus(t, rec, `holdfast; hit; detail=hot; ttl=1799; key="product:1"`, `holdfast; hit; detail=hot; ttl=2; key="stock:1"`)
	if rec.Body.String() != first {
		t.Errorf("hit body %q differs from miss body %q", rec.Body, first)
	}
	if got := rec.Header().Get("Content-Length"); got != "" && got != strconv.Itoa(len(first)) {
		t.Errorf("Content-Length %s, body %d bytes", got, len(first))
	}
	if e.store.count("product") != 1 || e.store.count("stock") != 1 {
		t.Errorf("store reads product %d stock %d, want 1 each", e.store.count("product"), e.store.count("stock"))
	}
}

// TestAgeCountsFromOrigin: Age is the time since the database read, not
// since the value entered the tier that served it.
func TestAgeCountsFromOrigin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{})
		if rec := e.get("/v1/products?category=kitchen"); rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		time.Sleep(90 * time.Second)
		rec := e.get("/v1/products?category=kitchen&page=1&size=20&sort=name") // normalizes to the same key
		wantCacheStatus(t, rec, "holdfast; hit; detail=hot; ttl=510")
		if got := rec.Header().Get("Age"); got != "90" {
			t.Errorf("Age %q, want 90", got)
		}
		if n := e.store.count("list"); n != 1 {
			t.Errorf("list loads %d, want 1", n)
		}
	})
}

// TestStaleWhileRevalidate: with a shared tier, a stock value between its
// soft (3 s) and hard (5 s) time is served at once, marked stale, while one
// background refresh reloads it; the next read gets the refreshed value.
func TestStaleWhileRevalidate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{shared: newInmemTier()})
		e.get("/v1/products/2")
		e.store.mu.Lock()
		st := e.store.stock[2]
		st.Available = 7
		e.store.stock[2] = st
		e.store.mu.Unlock()

		time.Sleep(4 * time.Second)
		rec := e.get("/v1/products/2")
		// Every key read stays in process (the shared tier has an
		// invalidation stream), but never past its soft time: the product
		// comes from the hot tier, the stale stock from the shared tier.
		wantCacheStatus(t, rec, `holdfast; hit; detail=hot`, `holdfast; hit; fwd=stale; detail=shared/revalidating; ttl=-1; key="stock:2"`)
		if got := rec.Header().Get("Age"); got != "4" {
			t.Errorf("Age %q, want 4 (the stock part's)", got)
		}
		if b := decode[productBody](t, rec); b.Stock.Available != 10 {
			t.Errorf("stale read shows %d available, want the old 10", b.Stock.Available)
		}
		synctest.Wait() // the background refresh finishes
		if n := e.store.count("stock"); n != 2 {
			t.Fatalf("stock loads %d, want 2 (one refresh)", n)
		}
		rec = e.get("/v1/products/2")
		wantCacheStatus(t, rec, `holdfast; hit; detail=hot`, `holdfast; hit; detail=hot; ttl=3`)
		if b := decode[productBody](t, rec); b.Stock.Available != 7 {
			t.Errorf("after the refresh %d available, want 7", b.Stock.Available)
		}
	})
}

// TestStaleIfError: past the hard time, with the database failing, a value
// within the stale-if-error window is served and marked so; past the window
// the failure shows.
func TestStaleIfError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{})
		e.get("/v1/products/3")
		e.get("/v1/products?sort=price")
		e.store.setReadErr(errors.New("database unreachable"))

		time.Sleep(6 * time.Second) // stock: hard 5 s, window until 10 s
		rec := e.get("/v1/products/3")
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		wantCacheStatus(t, rec, `holdfast; hit; detail=hot`, `holdfast; hit; fwd=stale; detail=memory/source-failed; ttl=-3; key="stock:3"`)
		if got := rec.Header().Get("Age"); got != "6" {
			t.Errorf("Age %q, want 6", got)
		}

		time.Sleep(5 * time.Second) // 11 s: past the stock window
		rec = e.get("/v1/products/3")
		if code := errorCode(t, rec, 500); code != "internal" {
			t.Errorf("code %q", code)
		}
		if strings.Contains(rec.Body.String(), "unreachable") {
			t.Errorf("error body leaks the cause: %s", rec.Body)
		}

		time.Sleep(10 * time.Minute) // list: hard 10 min, window until 20 min
		rec = e.get("/v1/products?sort=price")
		wantCacheStatus(t, rec, "holdfast; hit; fwd=stale; detail=memory/source-failed")
		if got := rec.Header().Get("Age"); got != "611" {
			t.Errorf("Age %q, want 611", got)
		}
	})
}

// TestOverloaded: with a load limit of 1 held by a slow load, a miss on
// another key has nothing stale to serve and gets 503 with Retry-After and
// a JSON error at once, not after a wait; the slow load still completes.
func TestOverloaded(t *testing.T) {
	e := newEnv(t, setup{maxLoads: 1, policies: withoutReservedLoads})
	e.store.blockID, e.store.entered, e.store.release = 4, make(chan struct{}), make(chan struct{})
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- e.get("/v1/products/4") }()
	<-e.store.entered

	start := time.Now()
	rec := e.get("/v1/products/5")
	if code := errorCode(t, rec, 503); code != "overloaded" {
		t.Errorf("code %q", code)
	}
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("rejection took %v: it must not queue", d)
	}
	close(e.store.release)
	if rec := <-done; rec.Code != 200 {
		t.Errorf("the slow load ended %d: %s", rec.Code, rec.Body)
	}
	if s := e.cache.Stats()[httpapi.NamespaceProduct]; s.Get("overloaded") != 1 {
		t.Errorf("Overloaded %d, want 1", s.Get("overloaded"))
	}
}

// TestCollapsed: a read that waits for another read's load of the same key
// says "collapsed", and the store is read once.
func TestCollapsed(t *testing.T) {
	e := newEnv(t, setup{})
	e.store.blockID, e.store.entered, e.store.release = 1, make(chan struct{}), make(chan struct{})
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- e.get("/v1/products/1") }()
	<-e.store.entered
	second := make(chan *httptest.ResponseRecorder)
	go func() { second <- e.get("/v1/products/1") }()
	for e.cache.Stats()[httpapi.NamespaceProduct].Get("coalesced") == 0 {
		time.Sleep(time.Millisecond)
	}
	close(e.store.release)
	r1, r2 := <-first, <-second
	// Which of the two then loads the stock part, and whether the other
	// waits for it or finds it hot, is up to the scheduler.
	wantCacheStatus(t, r1, "holdfast; fwd=miss; stored; ttl", "holdfast; ")
	wantCacheStatus(t, r2, "holdfast; fwd=miss; stored; collapsed; ttl", "holdfast; ")
	if n := e.store.count("product"); n != 1 {
		t.Errorf("product loads %d, want 1", n)
	}
}

// TestUnknownProduct: an unknown id is a 404 JSON error, and the negative
// answer is cached: the second request does not reach the store.
func TestUnknownProduct(t *testing.T) {
	e := newEnv(t, setup{})
	for i, want := range []string{"holdfast; fwd=miss; stored", "holdfast; hit; detail=hot"} {
		rec := e.get("/v1/products/999")
		if code := errorCode(t, rec, 404); code != "not_found" {
			t.Errorf("code %q", code)
		}
		wantCacheStatus(t, rec, want)
		if n := e.store.count("product"); n != 1 {
			t.Errorf("request %d: product loads %d, want 1", i, n)
		}
	}
}

// TestUpdateInvalidates: an update with the right version answers the new
// product and ETag, and the next read loads the new value; the old version
// then conflicts.
func TestUpdateInvalidates(t *testing.T) {
	e := newEnv(t, setup{shared: newInmemTier()})
	if b := decode[productBody](t, e.get("/v1/products/1")); b.Product.Version != 1 {
		t.Fatalf("version %d", b.Product.Version)
	}
	e.get("/v1/products/1") // now in the shared tier
	body := `{"name":"Red Kettle Pro","price_cents":2500,"status":"active","category":"kitchen"}`
	rec := e.do(http.MethodPut, "/v1/products/1", body, "If-Match", `"1"`, "Content-Type", "application/json")
	if rec.Code != 200 {
		t.Fatalf("PUT status %d: %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("ETag"); got != `"2"` {
		t.Errorf("ETag %q", got)
	}
	if p := decode[catalog.Product](t, rec); p.Name != "Red Kettle Pro" || p.Version != 2 {
		t.Errorf("PUT answered %+v", p)
	}

	rec = e.get("/v1/products/1")
	wantCacheStatus(t, rec, `holdfast; fwd=miss; stored; ttl=1799; key="product:1"`, `holdfast; hit; detail=hot`)
	if b := decode[productBody](t, rec); b.Product.Name != "Red Kettle Pro" || b.Product.PriceCents != 2500 || b.Product.Version != 2 {
		t.Errorf("read after update: %+v", b.Product)
	}

	rec = e.do(http.MethodPut, "/v1/products/1", body, "If-Match", `"1"`)
	if code := errorCode(t, rec, 409); code != "version_conflict" {
		t.Errorf("code %q", code)
	}
	// The version may come in the body instead of If-Match.
	rec = e.do(http.MethodPut, "/v1/products/1", `{"name":"Red Kettle","price_cents":1000,"status":"hidden","category":"kitchen","version":2}`)
	if rec.Code != 200 {
		t.Fatalf("PUT with body version: %d %s", rec.Code, rec.Body)
	}
	if b := decode[productBody](t, e.get("/v1/products/1")); b.Product.Status != catalog.StatusHidden {
		t.Errorf("status %q after update", b.Product.Status)
	}
}

// TestReserve: a reservation goes to the store, never the cache, and
// invalidates the stock key, so the next read shows the new figure while the
// product part stays cached.
func TestReserve(t *testing.T) {
	e := newEnv(t, setup{})
	e.get("/v1/products/2")
	rec := e.do(http.MethodPost, "/v1/products/2/reserve", `{"quantity":3}`)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	if s := decode[catalog.Stock](t, rec); s.Available != 7 {
		t.Errorf("after reserving 3 of 10: %d", s.Available)
	}
	if rec.Header().Get("Cache-Status") != "" {
		t.Errorf("a write has Cache-Status %q", rec.Header().Get("Cache-Status"))
	}
	rec = e.get("/v1/products/2")
	wantCacheStatus(t, rec, "holdfast; hit; detail=hot", `holdfast; fwd=miss; stored; ttl=2; key="stock:2"`)
	if b := decode[productBody](t, rec); b.Stock.Available != 7 {
		t.Errorf("read after reserve: %d available", b.Stock.Available)
	}

	e.get("/v1/products/2") // stock hot again
	rec = e.do(http.MethodPost, "/v1/products/2/reserve", `{"quantity":8}`)
	if code := errorCode(t, rec, 409); code != "insufficient_stock" {
		t.Errorf("code %q", code)
	}
	// Invalidated even on failure: the cached figure was too high.
	wantCacheStatus(t, e.get("/v1/products/2"), "holdfast; hit", "holdfast; fwd=miss")
}

// TestBadInput: every malformed request is refused with the right status
// and a JSON error code, before it reaches the store.
func TestBadInput(t *testing.T) {
	long := strings.Repeat("a", catalog.MaxPrefixLen+1)
	okBody := `{"name":"X","price_cents":1,"status":"active","category":"c"}`
	cases := []refusal{
		{"letters id", "GET", "/v1/products/abc", "", nil, 400, "invalid_id"},
		{"zero id", "GET", "/v1/products/0", "", nil, 400, "invalid_id"},
		{"negative id", "GET", "/v1/products/-1", "", nil, 400, "invalid_id"},
		{"signed id", "GET", "/v1/products/+1", "", nil, 400, "invalid_id"},
		{"19-digit id", "GET", "/v1/products/1234567890123456789", "", nil, 400, "invalid_id"},
		{"unknown id", "GET", "/v1/products/77", "", nil, 404, "not_found"},
		{"page zero", "GET", "/v1/products?page=0", "", nil, 400, "invalid_query"},
		{"page not a number", "GET", "/v1/products?page=x", "", nil, 400, "invalid_query"},
		{"page too far", "GET", "/v1/products?page=10001", "", nil, 400, "invalid_query"},
		{"size too big", "GET", "/v1/products?size=101", "", nil, 400, "invalid_query"},
		{"unknown sort", "GET", "/v1/products?sort=random", "", nil, 400, "invalid_query"},
		{"repeated category", "GET", "/v1/products?category=a&category=b", "", nil, 400, "invalid_query"},
		{"category too long", "GET", "/v1/products?category=" + strings.Repeat("c", 65), "", nil, 400, "invalid_query"},
		{"query string too long", "GET", "/v1/products?category=" + strings.Repeat("c", 1100), "", nil, 400, "query_too_long"},
		{"search prefix too long", "GET", "/v1/search?q=" + long, "", nil, 400, "query_too_long"},
		{"search q too many bytes", "GET", "/v1/search?q=" + strings.Repeat("%C3%A9", 130), "", nil, 400, "query_too_long"},
		{"search NUL", "GET", "/v1/search?q=a%00b", "", nil, 400, "invalid_query"},
		{"search bad UTF-8", "GET", "/v1/search?q=%FF", "", nil, 400, "invalid_query"},
		{"unknown route", "GET", "/v2/things", "", nil, 404, "no_route"},
		{"wrong method", "DELETE", "/v1/products/1", "", nil, 405, "method_not_allowed"},
		{"PUT bad id", "PUT", "/v1/products/x", okBody, []string{"If-Match", `"1"`}, 400, "invalid_id"},
		{"PUT unknown id", "PUT", "/v1/products/77", okBody, []string{"If-Match", `"1"`}, 404, "not_found"},
		{"PUT unknown field", "PUT", "/v1/products/1", `{"name":"X","price_cents":1,"status":"active","category":"c","colour":"red"}`, []string{"If-Match", `"1"`}, 400, "unknown_field"},
		{"PUT missing field", "PUT", "/v1/products/1", `{"name":"X","status":"active","category":"c"}`, []string{"If-Match", `"1"`}, 400, "missing_field"},
		{"PUT bad JSON", "PUT", "/v1/products/1", `{"name":`, []string{"If-Match", `"1"`}, 400, "invalid_body"},
		{"PUT wrong type", "PUT", "/v1/products/1", `{"name":"X","price_cents":"1","status":"active","category":"c"}`, []string{"If-Match", `"1"`}, 400, "invalid_body"},
		{"PUT trailing data", "PUT", "/v1/products/1", okBody + `{}`, []string{"If-Match", `"1"`}, 400, "invalid_body"},
		{"PUT body over 64 KiB", "PUT", "/v1/products/1", `{"name":"` + strings.Repeat("x", 65<<10) + `"}`, []string{"If-Match", `"1"`}, 413, "body_too_large"},
		{"PUT not JSON", "PUT", "/v1/products/1", okBody, []string{"If-Match", `"1"`, "Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"PUT bad status", "PUT", "/v1/products/1", `{"name":"X","price_cents":1,"status":"gone","category":"c"}`, []string{"If-Match", `"1"`}, 400, "invalid_input"},
		{"PUT negative price", "PUT", "/v1/products/1", `{"name":"X","price_cents":-1,"status":"active","category":"c"}`, []string{"If-Match", `"1"`}, 400, "invalid_input"},
		{"PUT no version", "PUT", "/v1/products/1", okBody, nil, 428, "version_required"},
		{"PUT weak If-Match", "PUT", "/v1/products/1", okBody, []string{"If-Match", `W/"1"`}, 412, "precondition_failed"},
		{"PUT If-Match star", "PUT", "/v1/products/1", okBody, []string{"If-Match", `*`}, 428, "version_required"},
		{"PUT versions disagree", "PUT", "/v1/products/1", `{"name":"X","price_cents":1,"status":"active","category":"c","version":2}`, []string{"If-Match", `"1"`}, 400, "invalid_if_match"},
		{"reserve zero", "POST", "/v1/products/1/reserve", `{"quantity":0}`, nil, 400, "invalid_input"},
		{"reserve unknown field", "POST", "/v1/products/1/reserve", `{"quantity":1,"qty":1}`, nil, 400, "unknown_field"},
		{"reserve unknown id", "POST", "/v1/products/77/reserve", `{"quantity":1}`, nil, 404, "not_found"},
		{"reserve bad id", "POST", "/v1/products/1x/reserve", `{"quantity":1}`, nil, 400, "invalid_id"},
		{"reserve body over 64 KiB", "POST", "/v1/products/1/reserve", strings.Repeat(" ", 65<<10) + `{"quantity":1}`, nil, 413, "body_too_large"},
	}
	e := newEnv(t, setup{})
	e.refuses(t, cases)
	if got := e.do("DELETE", "/v1/products/1", "").Header().Get("Allow"); got != "GET, HEAD, PUT" {
		t.Errorf("Allow %q", got)
	}
	if n := e.store.reserves; n != 1 { // only "reserve unknown id" reaches the store
		t.Errorf("store reserves %d, want 1", n)
	}
	if b := decode[productBody](t, e.get("/v1/products/1")); b.Product.Version != 1 {
		t.Errorf("a refused update changed the product: %+v", b.Product)
	}
}

// TestListAndSearch: list pages and search results are cached under their
// normalized query, so spellings of one query share an entry.
func TestListAndSearch(t *testing.T) {
	e := newEnv(t, setup{})
	rec := e.get("/v1/products?category=kitchen&size=2")
	wantCacheStatus(t, rec, "holdfast; fwd=miss; stored; ttl=599")
	page := decode[catalog.Page](t, rec)
	if page.Total != 3 || len(page.Items) != 2 || page.Page != 1 || page.Size != 2 {
		t.Errorf("page %+v", page)
	}
	wantCacheStatus(t, e.get("/v1/products?size=2&category=kitchen&page=1&sort=name"), "holdfast; hit; detail=hot")

	type searchBody struct {
		Prefix string            `json:"prefix"`
		Items  []catalog.Product `json:"items"`
	}
	rec = e.get("/v1/search?q=RED")
	wantCacheStatus(t, rec, "holdfast; fwd=miss; stored; ttl=299")
	sb := decode[searchBody](t, rec)
	if sb.Prefix != "red" || len(sb.Items) != 3 {
		t.Errorf("search: %+v", sb)
	}
	wantCacheStatus(t, e.get("/v1/search?q=%20%20red"), "holdfast; hit; detail=hot")
	if n := e.store.count("search"); n != 1 {
		t.Errorf("search loads %d, want 1", n)
	}
	if sb := decode[searchBody](t, e.get("/v1/search?q=p00000")); len(sb.Items) != 5 {
		t.Errorf("code search found %d", len(sb.Items))
	}
	if sb := decode[searchBody](t, e.get("/v1/search")); sb.Prefix != "" || len(sb.Items) != 0 {
		t.Errorf("empty search: %+v", sb)
	}
}

// TestHealthAndReady: liveness never checks dependencies; readiness needs
// the database and only reports Redis.
func TestHealthAndReady(t *testing.T) {
	redisDown := httpapi.Check{Name: "redis", Func: func(context.Context) error { return errors.New("connection refused") }}
	e := newEnv(t, setup{checks: []httpapi.Check{redisDown}})
	if rec := e.get("/healthz"); rec.Code != 200 {
		t.Errorf("healthz %d", rec.Code)
	}
	type ready struct {
		Status string
		Checks map[string]struct {
			Status   string
			Required bool
			Error    string
		}
	}
	rec := e.get("/readyz")
	r := decode[ready](t, rec)
	if rec.Code != 200 || r.Status != "ready" || r.Checks["database"].Status != "ok" || r.Checks["redis"].Status != "down" || r.Checks["redis"].Required {
		t.Errorf("readyz %d %+v", rec.Code, r)
	}
	e.store.mu.Lock()
	e.store.pingErr = errors.New("disk gone")
	e.store.mu.Unlock()
	rec = e.get("/readyz")
	if r := decode[ready](t, rec); rec.Code != 503 || r.Status != "not_ready" || r.Checks["database"].Error != "" {
		t.Errorf("readyz with the database down: %d %+v", rec.Code, r)
	}
	if rec := e.get("/healthz"); rec.Code != 200 {
		t.Errorf("healthz with the database down: %d", rec.Code)
	}
}

// TestMetrics: /metrics serves the HTTP counters by route pattern (never by
// raw path), the latency histogram and the pool gauges.
func TestMetrics(t *testing.T) {
	e := newEnv(t, setup{})
	e.get("/v1/products/1")
	e.get("/v1/products/abc")
	e.get("/nope/123")
	rec := e.get("/metrics")
	if rec.Code != 200 {
		t.Fatalf("metrics %d", rec.Code)
	}
	body := rec.Body.String()
	for _, want := range []string{
		`catalogd_http_requests_total{code="200",route="GET /v1/products/{id}"} 1`,
		`catalogd_http_requests_total{code="400",route="GET /v1/products/{id}"} 1`,
		`catalogd_http_requests_total{code="404",route="unmatched"} 1`,
		`catalogd_http_request_duration_seconds_count{route="GET /v1/products/{id}"} 2`,
		`catalogd_db_pool_in_use_connections{pool="fake"} 1`,
		`catalogd_db_pool_max_open_connections{pool="fake"} 4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(body, "/nope/123") {
		t.Error("a raw path became a label value")
	}
}

// TestNewHandlerErrors: a missing store or cache, or a namespace that
// exists already, is an error, not a panic.
func TestNewHandlerErrors(t *testing.T) {
	if _, err := httpapi.NewHandler(httpapi.Config{}); err == nil {
		t.Error("no error without Store and Cache")
	}
	cache, _ := holdfast.New(holdfast.Options{})
	defer cache.Close()
	cfg := httpapi.Config{Store: newFakeStore(), Cache: cache, Logger: quiet}
	if _, err := httpapi.NewHandler(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := httpapi.NewHandler(cfg); err == nil {
		t.Error("no error when the namespaces exist already")
	}
}

// TestRacingLoadIsRefused: another instance's load that read the old row
// before an update tries to put it into the shared tier after the update's
// invalidation. holdfast's versioned write refuses it, and the next read
// loads the new row.
func TestRacingLoadIsRefused(t *testing.T) {
	shared := newInmemTier()
	e := newEnv(t, setup{shared: shared})
	e.get("/v1/products/1")
	ctx := context.Background()
	// The load's flight writes the shared tier after it has answered: on
	// a busy machine the GET can return first.
	var old []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		v, found, err := shared.Get(ctx, "product:1")
		if err != nil {
			t.Fatal(err)
		}
		if found {
			old = v
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("product:1 not in the shared tier 5 s after its load")
		}
	}
	// The racing instance reads the key's version, then the old row ...
	version, err := shared.Version(ctx, "product:1")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"name":"New Name","price_cents":1,"status":"active","category":"kitchen","version":1}`
	if rec := e.do(http.MethodPut, "/v1/products/1", body); rec.Code != 200 {
		t.Fatalf("PUT %d %s", rec.Code, rec.Body)
	}
	// ... and writes it after the update's invalidation.
	stored, err := shared.SetIfVersion(ctx, tier.Item{Key: "product:1", Value: old, TTL: time.Hour}, version)
	if err != nil || stored {
		t.Fatalf("the racing instance's stale write was stored (%v, %v)", stored, err)
	}
	rec := e.get("/v1/products/1")
	wantCacheStatus(t, rec, "holdfast; fwd=miss; stored", "holdfast; ")
	if b := decode[productBody](t, rec); b.Product.Name != "New Name" {
		t.Errorf("after the update: %q", b.Product.Name)
	}
}

// TestRejectedRefreshServesStale is the stock case of a product service whose
// stock entries (TTL 5 s) expired together while misses fought for one load
// slot, here without Redis: the load limit (1) is taken by another key's slow
// load when a stock value passes its soft time; the refresh is rejected, and
// the old value is served until its hard time instead of a 503. Past the hard
// time, within the stale-if-error window, it is still served, marked so.
func TestRejectedRefreshServesStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The slow load must outlast the test's 6 s.
		e := newEnv(t, setup{maxLoads: 1, policies: func(p *httpapi.Policies) {
			withoutReservedLoads(p)
			p.Product.LoadTimeout = time.Minute
		}})
		e.get("/v1/products/1")
		e.get("/v1/products/3")
		e.store.blockID, e.store.entered, e.store.release = 4, make(chan struct{}), make(chan struct{})
		done := make(chan int)
		go func() { done <- e.get("/v1/products/4").Code }()
		<-e.store.entered

		time.Sleep(4 * time.Second) // stock of 1: soft 3 s, hard 5 s
		rec := e.get("/v1/products/1")
		if rec.Code != 200 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		wantCacheStatus(t, rec, "holdfast; hit; detail=hot", `holdfast; hit; fwd=stale; detail=memory/revalidating; ttl=-1; key="stock:1"`)

		time.Sleep(2 * time.Second) // 6 s: past hard, within hard + 5 s
		wantCacheStatus(t, e.get("/v1/products/3"), "holdfast; hit; detail=hot", `holdfast; hit; fwd=stale; detail=memory/overloaded; ttl=-3; key="stock:3"`)

		close(e.store.release)
		if code := <-done; code != 200 {
			t.Errorf("the slow load ended %d", code)
		}
		// The refresh of stock 1 and the load of stock 3's reader were
		// rejected; only the second was a read's.
		if s := e.cache.Stats()[httpapi.NamespaceStock]; s.Get("load.rejected") != 1 || s.Get("refresh.rejected") != 1 || s.Get("overloaded") != 0 {
			t.Errorf("stock: %d rejected, %d refreshes rejected, %d overloaded; want 1, 1, 0", s.Get("load.rejected"), s.Get("refresh.rejected"), s.Get("overloaded"))
		}
	})
}

// TestLowStockRefreshesSooner: a product with little stock left has its
// stock figure kept 1 s (its loader sets the lifetime), one with plenty the
// namespace's 3 s soft TTL.
func TestLowStockRefreshesSooner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{shared: newInmemTier()})
		e.store.mu.Lock()
		st := e.store.stock[2]
		st.Available = 3
		e.store.stock[2] = st
		e.store.mu.Unlock()
		e.get("/v1/products/2") // stock 3: low
		e.get("/v1/products/3") // stock 10: plenty
		synctest.Wait()
		time.Sleep(1500 * time.Millisecond)
		loads := e.store.count("stock")
		e.get("/v1/products/2")
		e.get("/v1/products/3")
		synctest.Wait()
		if n := e.store.count("stock") - loads; n != 1 {
			t.Fatalf("stock loads 1.5 s later: %d, want 1 (the low one's only)", n)
		}
		if st := e.cache.Stats()[httpapi.NamespaceStock]; st.Get("lifetimes.set") == 0 {
			t.Fatal("no lifetime set for the low stock")
		}
	})
}
