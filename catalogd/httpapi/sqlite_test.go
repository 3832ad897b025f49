package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/catalogd/sqlstore"
	"github.com/prometheus/client_golang/prometheus"
)

// The seeded catalog, as files, written once per test binary: seeding
// 10,000 products takes seconds under -race, a copy milliseconds.
var (
	seedOnce  sync.Once
	seedFiles map[string][]byte // by name: the database and any -wal or -shm beside it
	seedErr   error
)

// seededSQLite returns the path of a new SQLite catalog, seeded, in a
// directory of the test's own.
func seededSQLite(t *testing.T) string {
	t.Helper()
	seedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "catalogd-seed-")
		if err != nil {
			seedErr = err
			return
		}
		defer os.RemoveAll(dir)
		db, err := sqlstore.Open(context.Background(), sqlstore.SQLite, filepath.Join(dir, sqlstore.FileName), nil)
		if err != nil {
			seedErr = err
			return
		}
		if seedErr = db.Close(); seedErr != nil {
			return
		}
		names, err := filepath.Glob(filepath.Join(dir, sqlstore.FileName+"*"))
		if err != nil {
			seedErr = err
			return
		}
		seedFiles = map[string][]byte{}
		for _, n := range names {
			if seedFiles[filepath.Base(n)], err = os.ReadFile(n); err != nil {
				seedErr = err
				return
			}
		}
	})
	if seedErr != nil {
		t.Fatalf("seeding the SQLite catalog: %v", seedErr)
	}
	dir := t.TempDir()
	for name, b := range seedFiles {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, sqlstore.FileName)
}

// realServer serves the handler over a real SQLite store (seeded with the
// generated catalog) on a loopback port.
func realServer(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.SQLite, seededSQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cache, err := holdfast.New(holdfast.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	h, err := httpapi.NewHandler(httpapi.Config{Store: db, Cache: cache, Logger: quiet, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s := httpapi.NewServer(h, quiet)
	if err := s.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s.URL()
}

func call(t *testing.T, method, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if _, ok := req.Header["Content-Type"]; body != "" && !ok {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func unmarshal[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

// TestSQLiteEndToEnd runs every endpoint against the real embedded store
// over loopback HTTP: reads of the seeded catalog, an update seen by the
// next read, a reservation seen by the next read, and readiness.
func TestSQLiteEndToEnd(t *testing.T) {
	url := realServer(t)

	resp, b := call(t, "GET", url+"/v1/products/42", "")
	pb := unmarshal[productBody](t, b)
	if resp.StatusCode != 200 || pb.Product.Code != "P000042" || pb.Stock.ProductID != 42 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if cs := resp.Header.Get("Cache-Status"); !strings.HasPrefix(cs, "holdfast; fwd=miss; stored") {
		t.Errorf("Cache-Status %q", cs)
	}
	resp, _ = call(t, "GET", url+"/v1/products/42", "")
	if cs := resp.Header.Get("Cache-Status"); !strings.HasPrefix(cs, "holdfast; hit; detail=hot") {
		t.Errorf("second read Cache-Status %q", cs)
	}

	resp, b = call(t, "GET", url+"/v1/products?category=audio&size=5&sort=-price", "")
	page := unmarshal[catalog.Page](t, b)
	if resp.StatusCode != 200 || len(page.Items) != 5 || page.Total == 0 {
		t.Fatalf("list %d %s", resp.StatusCode, b)
	}
	for i, p := range page.Items {
		if p.Category != "audio" || (i > 0 && p.PriceCents > page.Items[i-1].PriceCents) {
			t.Errorf("list item %d out of order or category: %+v", i, p)
		}
	}

	resp, b = call(t, "GET", url+"/v1/search?q=P00004", "")
	sr := unmarshal[struct {
		Prefix string
		Items  []catalog.Product
	}](t, b)
	if resp.StatusCode != 200 || sr.Prefix != "p00004" || len(sr.Items) == 0 || len(sr.Items) > catalog.DefaultSearchLimit {
		t.Fatalf("search %d %s", resp.StatusCode, b)
	}

	upd := `{"name":"Renamed Speaker","price_cents":4200,"status":"active","category":"audio"}`
	resp, b = call(t, "PUT", url+"/v1/products/42", upd, "If-Match", `"1"`, "Content-Type", "application/json")
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"2"` {
		t.Fatalf("update %d %s", resp.StatusCode, b)
	}
	resp, b = call(t, "GET", url+"/v1/products/42", "")
	if cs := resp.Header.Get("Cache-Status"); !strings.HasPrefix(cs, "holdfast; fwd=miss") {
		t.Errorf("read after update should load: %q", cs)
	}
	if pb := unmarshal[productBody](t, b); pb.Product.Name != "Renamed Speaker" || pb.Product.Version != 2 {
		t.Errorf("read after update: %s", b)
	}
	resp, b = call(t, "PUT", url+"/v1/products/42", upd, "If-Match", `"1"`)
	if resp.StatusCode != 409 || !strings.Contains(string(b), `"version_conflict"`) {
		t.Errorf("stale update: %d %s", resp.StatusCode, b)
	}

	before := pb.Stock.Available
	resp, b = call(t, "POST", url+"/v1/products/42/reserve", `{"quantity":2}`)
	if resp.StatusCode != 200 || unmarshal[catalog.Stock](t, b).Available != before-2 {
		t.Fatalf("reserve %d %s (had %d)", resp.StatusCode, b, before)
	}
	_, b = call(t, "GET", url+"/v1/products/42", "")
	if pb := unmarshal[productBody](t, b); pb.Stock.Available != before-2 {
		t.Errorf("read after reserve: %d available, want %d", pb.Stock.Available, before-2)
	}

	resp, b = call(t, "GET", url+"/v1/products/10001", "")
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"not_found"`) {
		t.Errorf("unknown id: %d %s", resp.StatusCode, b)
	}
	resp, b = call(t, "GET", url+"/readyz", "")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"database":{"status":"ok"`) {
		t.Errorf("readyz %d %s", resp.StatusCode, b)
	}
	resp, b = call(t, "GET", url+"/metrics", "")
	if resp.StatusCode != 200 || !strings.Contains(string(b), `catalogd_db_pool_max_open_connections{pool="write"} 1`) {
		t.Errorf("metrics lack the SQLite pools: %d", resp.StatusCode)
	}
}
