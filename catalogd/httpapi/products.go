package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// invalidateTimeout bounds the cache invalidation after a write. The write
// has committed by then, so the invalidation runs even if the client has
// gone (a cancelled request must not leave the old value cached), but it
// must not hang on a frozen Redis either; the Redis tier's own write timeout
// (100 ms) is normally what ends it.
const invalidateTimeout = time.Second

// parseID reads the {id} path value: 1 to 18 decimal digits, above zero. The
// cache key is the canonical decimal form, so "007" and "7" share an entry.
func parseID(r *http.Request) (int64, string, error) {
	s := r.PathValue("id")
	if len(s) == 0 || len(s) > maxIDDigits {
		return 0, "", errorf(http.StatusBadRequest, codeInvalidID, "product id must be 1 to %d digits", maxIDDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "", errorf(http.StatusBadRequest, codeInvalidID, "product id %q is not a positive integer", s)
		}
	}
	id, _ := strconv.ParseInt(s, 10, 64) // 18 digits cannot overflow
	if id < 1 {
		return 0, "", errorf(http.StatusBadRequest, codeInvalidID, "product id must be positive")
	}
	if s[0] == '0' {
		s = strconv.FormatInt(id, 10)
	}
	return id, s, nil
}

// keyID turns a cache key back into the id; keys are only ever made by
// parseID, so a failure here is a bug, reported as an error, not a panic.
func keyID(key string) (int64, error) {
	id, err := strconv.ParseInt(key, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("catalogd http: bad cache key %q: %w", key, err)
	}
	return id, nil
}

// notFound turns the store's ErrNotFound into holdfast's, which the cache
// remembers for the namespace's NegativeTTL: repeated requests for an
// unknown id do not reach the database.
func notFound(err error) error {
	if errors.Is(err, catalog.ErrNotFound) {
		return fmt.Errorf("%w: %w", holdfast.ErrNotFound, err)
	}
	return err
}

// byID is the loader of a namespace keyed by product id: it reads the row
// with get and stores its JSON, which responses then write out unchanged.
func byID[T any](get func(context.Context, int64) (T, error)) holdfast.Loader {
	return func(ctx context.Context, key string) ([]byte, error) {
		id, err := keyID(key)
		if err != nil {
			return nil, err
		}
		v, err := get(ctx, id)
		if err != nil {
			return nil, notFound(err)
		}
		return json.Marshal(v)
	}
}

// lowStock is the stock figure under which a product's stock is kept only
// lowStockTTL: while little is left, every reservation may be the last, and
// a figure three seconds old (the stock namespace's soft TTL) is more
// often wrong than when there is plenty.
const (
	lowStock    = 5
	lowStockTTL = time.Second
)

// stockLoader loads stock by id, and gives low stock a shorter lifetime.
func stockLoader(get func(context.Context, int64) (catalog.Stock, error)) holdfast.Loader {
	return func(ctx context.Context, key string) ([]byte, error) {
		id, err := keyID(key)
		if err != nil {
			return nil, err
		}
		s, err := get(ctx, id)
		if err != nil {
			return nil, notFound(err)
		}
		if s.Available < lowStock {
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: lowStockTTL})
		}
		return json.Marshal(s)
	}
}

// getProduct serves GET /v1/products/{id}: product info and stock, each read
// through its namespace, spliced into {"product":…,"stock":…} without
// decoding either. The two reads are sequential, not concurrent: on a cold
// key each may need a load slot, and with a small load limit (a product
// service ran with 1 per pod) a concurrent pair would reject itself.
//
// Cache-Status has one member per part, told apart by key="product:<id>" and
// key="stock:<id>"; Age is the age of the older part.
func (h *Handler) getProduct(w http.ResponseWriter, r *http.Request) {
	_, key, err := parseID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	ctx := r.Context()
	pr, err := h.product.Get(ctx, key, h.loadProduct)
	if err != nil {
		h.writeCachedError(w, r, err, pr, NamespaceProduct, key)
		return
	}
	st, err := h.stock.Get(ctx, key, h.loadStock)
	if err != nil {
		h.writeCachedError(w, r, err, st, NamespaceStock, key)
		return
	}
	now := h.clock.Now()
	var sb [192]byte
	status := appendCacheStatus(sb[:0], pr, now, NamespaceProduct+":"+key)
	status = append(status, ", "...)
	status = appendCacheStatus(status, st, now, NamespaceStock+":"+key)
	hdr := w.Header()
	setCacheHeaders(hdr, status, max(ageSeconds(pr, now), ageSeconds(st, now)))
	const open, mid, end = `{"product":`, `,"stock":`, "}\n"
	hdr["Content-Type"] = jsonContentType
	hdr["Content-Length"] = []string{strconv.Itoa(len(open) + len(pr.Value) + len(mid) + len(st.Value) + len(end))}
	// net/http buffers the writes; four calls cost no copy of the values.
	io.WriteString(w, open)
	w.Write(pr.Value)
	io.WriteString(w, mid)
	w.Write(st.Value)
	io.WriteString(w, end)
}

// jsonContentType is shared by every JSON response; header values are never
// modified after they are set.
var jsonContentType = []string{"application/json"}

// writeCachedError writes a read's error. A cached "not found" still says
// where it came from: a negative entry is a cache hit too.
func (h *Handler) writeCachedError(w http.ResponseWriter, r *http.Request, err error, res holdfast.Result, ns, key string) {
	if res.NotFound {
		now := h.clock.Now()
		k := ""
		if ns == NamespaceProduct || ns == NamespaceStock {
			k = ns + ":" + key
		}
		setCacheHeaders(w.Header(), appendCacheStatus(nil, res, now, k), ageSeconds(res, now))
	}
	h.writeError(w, r, err)
}

// writeCached writes a single cached JSON value with its cache headers.
func (h *Handler) writeCached(w http.ResponseWriter, res holdfast.Result) {
	now := h.clock.Now()
	var sb [96]byte
	hdr := w.Header()
	setCacheHeaders(hdr, appendCacheStatus(sb[:0], res, now, ""), ageSeconds(res, now))
	hdr["Content-Type"] = jsonContentType
	hdr["Content-Length"] = []string{strconv.Itoa(len(res.Value))}
	w.Write(res.Value)
}

// updateRequest is the body of PUT /v1/products/{id}. Every product field is
// required, as catalog.ProductUpdate replaces all four: a missing field is
// an error, never a silent zero price. Version is the expected version when
// no If-Match header is sent.
type updateRequest struct {
	Name       *string         `json:"name"`
	PriceCents *int64          `json:"price_cents"`
	Status     *catalog.Status `json:"status"`
	Category   *string         `json:"category"`
	Version    *int64          `json:"version"`
}

// updateProduct serves PUT /v1/products/{id}: it replaces the product's name,
// price, status and category if its version is still the expected one (from
// If-Match: "<version>", else the body's "version"; see expectedVersions),
// and answers with the stored product and its new version as ETag. A version
// that moved on is a 409.
//
// After the write commits it invalidates product info of this id, and only
// that: the package documentation lists what is not invalidated and the
// staleness bound of each.
func (h *Handler) updateProduct(w http.ResponseWriter, r *http.Request) {
	id, key, err := parseID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req updateRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	var missing []string
	for _, f := range []struct {
		name string
		nil  bool
	}{{"name", req.Name == nil}, {"price_cents", req.PriceCents == nil}, {"status", req.Status == nil}, {"category", req.Category == nil}} {
		if f.nil {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeMissingField, "missing fields: %s", strings.Join(missing, ", ")))
		return
	}
	u := catalog.ProductUpdate{Name: *req.Name, PriceCents: *req.PriceCents, Status: *req.Status, Category: *req.Category}
	if err := u.Validate(); err != nil {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeInvalidInput, "%s", strings.TrimPrefix(err.Error(), catalog.ErrInvalid.Error()+": ")))
		return
	}
	m, err := parseIfMatch(r.Header)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	versions, err := expectedVersions(m, req.Version)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	version := versions[0]
	if len(versions) > 1 {
		// A list of tags matches if the current version is among them.
		cur, err := h.store.Product(r.Context(), id)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if !slices.Contains(versions, cur.Version) {
			h.writeError(w, r, catalog.ErrConflict)
			return
		}
		version = cur.Version
	}
	p, err := h.store.UpdateProduct(r.Context(), id, version, u)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.invalidate(h.product, key)
	b, err := json.Marshal(p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	hdr := w.Header()
	hdr["Content-Type"] = jsonContentType
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("ETag", strconv.Quote(strconv.FormatInt(p.Version, 10)))
	w.Write(append(b, '\n'))
}

// reserveRequest is the body of POST /v1/products/{id}/reserve.
type reserveRequest struct {
	Quantity int64 `json:"quantity"`
}

// reserve serves POST /v1/products/{id}/reserve: it takes stock in the
// database with optimistic locking (catalog.Store.Reserve) and never through
// the cache — the cached stock is a hint for pages, and only the database
// decides whether an order gets its units. Afterwards the stock
// key is invalidated, also when the reservation failed for lack of stock,
// because then the cached figure was evidently too high. It answers with
// the stock after the reservation.
func (h *Handler) reserve(w http.ResponseWriter, r *http.Request) {
	id, key, err := parseID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req reserveRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if req.Quantity < 1 {
		h.writeError(w, r, errorf(http.StatusBadRequest, codeInvalidInput, "quantity must be at least 1"))
		return
	}
	s, err := h.store.Reserve(r.Context(), id, req.Quantity)
	if err == nil || errors.Is(err, catalog.ErrInsufficientStock) {
		h.invalidate(h.stock, key)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	b, err := json.Marshal(s)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	hdr := w.Header()
	hdr["Content-Type"] = jsonContentType
	hdr.Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}

// invalidate drops key from ns after a committed write, on a context that
// survives the client leaving (see invalidateTimeout).
func (h *Handler) invalidate(ns *holdfast.Namespace, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), invalidateTimeout)
	defer cancel()
	if err := ns.Invalidate(ctx, key); err != nil {
		h.log.LogAttrs(ctx, slog.LevelWarn, "invalidation not delivered to the shared tier; other instances may serve the old value until its TTL",
			slog.String("namespace", ns.Name()), slog.String("key", key), slog.String("error", err.Error()))
	}
}
