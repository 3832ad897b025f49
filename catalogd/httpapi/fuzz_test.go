package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
)

// FuzzRequest sends arbitrary paths, queries, bodies and If-Match headers:
// the handler must never panic or answer 5xx (the fake store never fails),
// and every 4xx must be a JSON error with a code.
//
//	go test -run '^$' -fuzz FuzzRequest -fuzztime 30s ./httpapi
func FuzzRequest(f *testing.F) {
	f.Add(uint8(0), "/v1/products/1", "", "", "")
	f.Add(uint8(0), "/v1/products", "category=home&page=2&size=1&sort=-price", "", "")
	f.Add(uint8(0), "/v1/search", "q=Red%20", "", "")
	f.Add(uint8(1), "/v1/products/2", "", `{"name":"A","price_cents":1,"status":"active","category":"c"}`, `"1"`)
	f.Add(uint8(1), "/v1/products/2", "", `{"name":"A","price_cents":1,"status":"active","category":"c","version":1}`, "")
	f.Add(uint8(2), "/v1/products/3/reserve", "", `{"quantity":2}`, "")
	f.Add(uint8(3), "/v1/products/3", "", "", "")
	f.Add(uint8(2), "/v1/products/3/reserve", "", `{"quantity":1,"quantity":5}`, "")
	f.Add(uint8(1), "/v1/products/2", "", `{"name":"A","Price_Cents":1,"status":"active","category":"c"}`, `"1", W/"2"`)
	f.Add(uint8(0), "/v1/search", "q=%7Bx%7D", "", "")
	f.Add(uint8(0), "/v1/products", "category=%zz;sort=name", "", "")

	cache, err := holdfast.New(holdfast.Options{Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	defer cache.Close()
	h, err := httpapi.NewHandler(httpapi.Config{Store: newFakeStore(), Cache: cache, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	methods := []string{"GET", "PUT", "POST", "DELETE", "HEAD"}

	f.Fuzz(func(t *testing.T, m uint8, path, query, body, ifMatch string) {
		u := &url.URL{Path: "/" + strings.TrimPrefix(path, "/"), RawQuery: query}
		req := httptest.NewRequest(methods[int(m)%len(methods)], "/", strings.NewReader(body))
		req.URL, req.RequestURI = u, u.RequestURI()
		if ifMatch != "" && !strings.ContainsAny(ifMatch, "\r\n") {
			req.Header.Set("If-Match", ifMatch)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", req.Method, u, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && req.Method != "HEAD" && rec.Code != 301 {
			var eb struct{ Error struct{ Code string } }
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" {
				t.Fatalf("%s %s: %d with a non-JSON error %q", req.Method, u, rec.Code, rec.Body)
			}
		}
	})
}
