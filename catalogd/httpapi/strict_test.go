package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
)

// TestStrictQuery: a query string Go's URL.Query would half-parse (a bad
// escape, a ';' separator), an unknown sort or an unknown parameter is a 400
// with a JSON body, and nothing reaches the store or the cache.
func TestStrictQuery(t *testing.T) {
	e := newEnv(t, setup{})
	for _, target := range []string{
		"/v1/products?category=%zz",
		"/v1/products?sort=name;DROP",
		"/v1/products?sort=name%3BDROP",
		"/v1/products?sort=random",
		"/v1/products?categroy=home",
		"/v1/products?category=home&page=1&x=",
		"/v1/search?q=%zz",
		"/v1/search?q=red;x",
		"/v1/search?q=red&limit=100",
	} {
		t.Run(target, func(t *testing.T) {
			if code := errorCode(t, e.get(target), http.StatusBadRequest); code != "invalid_query" {
				t.Errorf("code %q, want invalid_query", code)
			}
		})
	}
	if n, m := e.store.count("list"), e.store.count("search"); n+m != 0 {
		t.Errorf("refused queries reached the store: %d list, %d search reads", n, m)
	}
	for ns, s := range e.cache.Stats() {
		if s.Get("loads") != 0 {
			t.Errorf("namespace %s: %d loads after refused queries", ns, s.Get("loads"))
		}
	}
}

// TestLongValidInputFitsKeys: input at the documented limits is served and
// cached whatever its bytes: a category of 40 or 64 emoji (4 bytes each,
// within the 64-character limit) once made a list key over the cache's
// 512-byte key limit, and was a 400.
func TestLongValidInputFitsKeys(t *testing.T) {
	e := newEnv(t, setup{})
	emoji := "\U0001F600"
	for _, target := range []string{
		"/v1/products?category=" + url.QueryEscape(strings.Repeat(emoji, 40)),
		"/v1/products?category=" + url.QueryEscape(strings.Repeat(emoji, catalog.MaxCategoryLen)) + "&page=10000&size=100&sort=-price",
		"/v1/products?category=" + url.QueryEscape(strings.Repeat("{%}", catalog.MaxCategoryLen/3)),
		"/v1/search?q=" + url.QueryEscape(strings.Repeat(emoji, catalog.MaxPrefixLen)),
		"/v1/search?q=" + url.QueryEscape(strings.Repeat("}%{", catalog.MaxPrefixLen/3)),
	} {
		for i, want := range []string{"holdfast; fwd=miss; stored", "holdfast; hit; detail=hot"} {
			rec := e.get(target)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: read %d: status %d: %s", target, i, rec.Code, rec.Body)
			}
			wantCacheStatus(t, rec, want)
		}
	}
}

// keyRecorder is a shared tier that remembers every key written to it.
type keyRecorder struct {
	*inmem.Tier
	mu   sync.Mutex
	keys []string
}

func (r *keyRecorder) record(k string) {
	r.mu.Lock()
	r.keys = append(r.keys, k)
	r.mu.Unlock()
}

func (r *keyRecorder) Set(ctx context.Context, items ...tier.Item) error {
	for _, it := range items {
		r.record(it.Key)
	}
	return r.Tier.Set(ctx, items...)
}

func (r *keyRecorder) SetIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	r.record(it.Key)
	return r.Tier.SetIfVersion(ctx, it, version)
}

// TestUserInputPicksNoSlot: no brace from a request reaches a shared-tier
// key. In a Redis Cluster the part of a key between braces picks its slot,
// so "{x}" in a search prefix would let a client aim all its misses at one
// primary; a lone brace would put a key and its sibling keys in different
// slots. The values still answer what was asked.
func TestUserInputPicksNoSlot(t *testing.T) {
	rec := &keyRecorder{Tier: newInmemTier()}
	e := newEnv(t, setup{shared: rec})
	for _, target := range []string{
		"/v1/search?q=" + url.QueryEscape("{tag}red"),
		"/v1/search?q=" + url.QueryEscape("red}"),
		"/v1/search?q=" + url.QueryEscape("{"),
		"/v1/products?category=" + url.QueryEscape("{tag}"),
		"/v1/products?category=" + url.QueryEscape("a}b{c"),
	} {
		res := e.get(target)
		if res.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", target, res.Code, res.Body)
		}
	}
	type searchBody struct {
		Prefix string            `json:"prefix"`
		Items  []catalog.Product `json:"items"`
	}
	if b := decode[searchBody](t, e.get("/v1/search?q="+url.QueryEscape("{Tag}Red"))); b.Prefix != "{tag}red" {
		t.Errorf("prefix %q, want the normalized input", b.Prefix)
	}
	// A load's value reaches the shared tier after it is returned: wait
	// for the five writes.
	var keys []string
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		rec.mu.Lock()
		keys = slices.Clone(rec.keys)
		rec.mu.Unlock()
		if len(keys) >= 5 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("only %d keys written to the shared tier: %q", len(keys), keys)
		}
	}
	for _, k := range keys {
		if strings.ContainsAny(k, "{}") {
			t.Errorf("shared-tier key %q holds a brace from the request", k)
		}
	}
}

// TestStrictJSON: bodies with a key given twice, a field name in another
// case, a value of the wrong kind, or no JSON media type are refused with a
// JSON error whose message names no Go type, and nothing is reserved or
// updated. encoding/json alone takes the last of duplicate keys (so
// {"quantity":1,"quantity":5} reserved 5) and any case of a field name.
func TestStrictJSON(t *testing.T) {
	upd := func(extra string) string {
		return `{"name":"X","price_cents":1,"status":"active","category":"c"` + extra + `}`
	}
	ifMatch := []string{"If-Match", `"1"`}
	cases := []refusal{
		{"reserve duplicate key", "POST", "/v1/products/1/reserve", `{"quantity":1,"quantity":5}`, nil, 400, "duplicate_field"},
		{"reserve field in upper case", "POST", "/v1/products/1/reserve", `{"QUANTITY":5}`, nil, 400, "unknown_field"},
		{"reserve field in mixed case", "POST", "/v1/products/1/reserve", `{"Quantity":5}`, nil, 400, "unknown_field"},
		{"reserve quantity as a string", "POST", "/v1/products/1/reserve", `{"quantity":"5"}`, nil, 400, "invalid_body"},
		{"reserve quantity past int64", "POST", "/v1/products/1/reserve", `{"quantity":1e30}`, nil, 400, "invalid_body"},
		{"reserve not an object", "POST", "/v1/products/1/reserve", `[{"quantity":1}]`, nil, 400, "invalid_body"},
		{"reserve nested duplicate", "POST", "/v1/products/1/reserve", `{"quantity":{"a":1,"a":2}}`, nil, 400, "invalid_body"},
		{"reserve no Content-Type", "POST", "/v1/products/1/reserve", `{"quantity":1}`, []string{"Content-Type", ""}, 415, "unsupported_media_type"},
		{"reserve text/plain", "POST", "/v1/products/1/reserve", `{"quantity":1}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"reserve +json suffix", "POST", "/v1/products/1/reserve", `{"quantity":1}`, []string{"Content-Type", "application/merge-patch+json"}, 415, "unsupported_media_type"},
		{"update duplicate name", "PUT", "/v1/products/1", upd(`,"name":"Y"`), ifMatch, 400, "duplicate_field"},
		{"update duplicate version", "PUT", "/v1/products/1", upd(`,"version":1,"version":1`), nil, 400, "duplicate_field"},
		{"update field in another case", "PUT", "/v1/products/1", `{"name":"X","Price_Cents":1,"status":"active","category":"c"}`, ifMatch, 400, "unknown_field"},
		{"update status as a number", "PUT", "/v1/products/1", `{"name":"X","price_cents":1,"status":5,"category":"c"}`, ifMatch, 400, "invalid_body"},
		{"update price as a fraction", "PUT", "/v1/products/1", `{"name":"X","price_cents":1.5,"status":"active","category":"c"}`, ifMatch, 400, "invalid_body"},
		{"update name as an object", "PUT", "/v1/products/1", `{"name":{},"price_cents":1,"status":"active","category":"c"}`, ifMatch, 400, "invalid_body"},
		{"update no Content-Type", "PUT", "/v1/products/1", upd(""), append([]string{"Content-Type", ""}, ifMatch...), 415, "unsupported_media_type"},
	}
	e := newEnv(t, setup{})
	e.refuses(t, cases, func(t *testing.T, rec *httptest.ResponseRecorder) {
		for _, goName := range []string{"int64", "Go ", "struct", "httpapi", "catalog.", "Request", "json:"} {
			if strings.Contains(rec.Body.String(), goName) {
				t.Errorf("error body names Go internals (%q): %s", goName, rec.Body)
			}
		}
	})
	if e.store.reserves != 0 {
		t.Errorf("%d reservations reached the store", e.store.reserves)
	}
	if b := decode[productBody](t, e.get("/v1/products/1")); b.Product.Version != 1 || b.Stock.Available != 10 {
		t.Errorf("a refused write changed product 1: %+v", b)
	}
	// The media type may carry parameters.
	if rec := e.do("POST", "/v1/products/1/reserve", `{"quantity":1}`, "Content-Type", "application/json; charset=utf-8"); rec.Code != 200 {
		t.Errorf("application/json with a charset: %d %s", rec.Code, rec.Body)
	}
}

// TestIfMatchRFC9110: If-Match is parsed as RFC 9110 writes it. A header
// that is not "*" or a list of entity tags is a 400; a tag that can never be
// this API's ETag ("+1" and "01" are other tags than "1") or a weak tag,
// which If-Match's strong comparison never matches, is a 412; "*" names no
// version and is a 428. A list matches when one of its tags is the current
// version. Nothing refused changes the product.
func TestIfMatchRFC9110(t *testing.T) {
	e := newEnv(t, setup{})
	body := `{"name":"X","price_cents":1,"status":"active","category":"c"}`
	for _, c := range []struct {
		ifMatch string
		status  int
		code    string
	}{
		{`"+1"`, 412, "precondition_failed"},
		{`"01"`, 412, "precondition_failed"},
		{`"1.0"`, 412, "precondition_failed"},
		{`W/"1"`, 412, "precondition_failed"},
		{`w/"1"`, 400, "invalid_if_match"},
		{`1`, 400, "invalid_if_match"},
		{`"1`, 400, "invalid_if_match"},
		{`"1" "2"`, 400, "invalid_if_match"},
		{`"1";"2"`, 400, "invalid_if_match"},
		{`"a"b"`, 400, "invalid_if_match"},
		{`"a b"`, 400, "invalid_if_match"},
		{`*, "1"`, 400, "invalid_if_match"},
		{` , `, 400, "invalid_if_match"},
		{`*`, 428, "version_required"},
		{`"5", "7"`, 409, "version_conflict"},
	} {
		rec := e.do(http.MethodPut, "/v1/products/1", body, "If-Match", c.ifMatch)
		if code := errorCode(t, rec, c.status); code != c.code {
			t.Errorf("If-Match %s: code %q, want %q", c.ifMatch, code, c.code)
		}
	}
	if b := decode[productBody](t, e.get("/v1/products/1")); b.Product.Version != 1 {
		t.Fatalf("a refused update changed product 1: %+v", b.Product)
	}
	for i, ifMatch := range []string{`"7", "1"`, `W/"2", "2"`, ` "3" , ,`} {
		rec := e.do(http.MethodPut, "/v1/products/1", body, "If-Match", ifMatch)
		if rec.Code != 200 || rec.Header().Get("ETag") != `"`+string(rune('2'+i))+`"` {
			t.Errorf("If-Match %s: %d %s, ETag %s", ifMatch, rec.Code, rec.Body, rec.Header().Get("ETag"))
		}
	}
}

// logSink collects log output from concurrent writers.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// count returns how many lines hold sub.
func (s *logSink) count(sub string) int {
	n := 0
	for line := range strings.Lines(s.String()) {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}
