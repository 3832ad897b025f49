package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
)

// TestAdminOnly: the profiles and the hot-key list are served by the Admin
// handler only, never by the API handler, and the profiles only when asked
// for.
func TestAdminOnly(t *testing.T) {
	for _, on := range []bool{false, true} {
		cache, _ := holdfast.New(holdfast.Options{Logger: quiet})
		defer cache.Close()
		h, err := httpapi.NewHandler(httpapi.Config{Store: newFakeStore(), Cache: cache, Logger: quiet, Pprof: on})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/debug/pprof/heap?debug=1", "/debug/pprof/cmdline", "/v1/hotkeys", "/hotkeys"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != 404 {
				t.Errorf("Pprof %v: the API serves %s: %d", on, path, rec.Code)
			}
		}
		for path, want := range map[string]int{
			"/debug/pprof/heap?debug=1": map[bool]int{false: 404, true: 200}[on],
			"/hotkeys":                  200,
		} {
			rec := httptest.NewRecorder()
			h.Admin().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != want {
				t.Errorf("Pprof %v: admin %s: %d, want %d", on, path, rec.Code, want)
			}
		}
	}
}

// TestHotKeysEndpoint: the admin handler's /hotkeys lists the products read
// often enough to be hot, per namespace, and none of the others.
func TestHotKeysEndpoint(t *testing.T) {
	e := newEnv(t, setup{shared: newInmemTier()})
	e.get("/v1/products/1")
	for range 300 {
		if rec := e.get("/v1/products/2"); rec.Code != 200 {
			t.Fatalf("product 2: %d %s", rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	e.h.Admin().ServeHTTP(rec, httptest.NewRequest("GET", "/hotkeys", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	body := decode[map[string][]struct {
		Key  string  `json:"key"`
		Rate float64 `json:"reads_per_second"`
	}](t, rec)
	for _, ns := range []string{httpapi.NamespaceProduct, httpapi.NamespaceStock} {
		if hk := body[ns]; len(hk) != 1 || hk[0].Key != "2" || hk[0].Rate < 1000.0/60 {
			t.Errorf("%s hot keys %+v, want product 2 alone, above 1,000 reads a minute", ns, hk)
		}
	}
	if hk, ok := body[httpapi.NamespaceList]; !ok || len(hk) != 0 {
		t.Errorf("list hot keys %+v, want an empty list", hk)
	}
}

// TestReadyzHidesErrors: with the database failing as PostgreSQL does
// (naming host, user and database) and a dependency that refuses
// connections (a real one), /readyz says which checks are down and nothing
// of why, since anyone can call it. The log says why: once for any number
// of polls, then once when the dependency is back.
func TestReadyzHidesErrors(t *testing.T) {
	db := newFakeStore()
	const dbErr = `failed to connect to user=catalog database=catalog: 10.0.0.7:5432 (db.internal): dial error: connection refused`
	db.pingErr = errors.New(dbErr)
	// A port that refuses connections: one that was listened on and closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var depUp sync.Mutex // held while the dependency is down
	depUp.Lock()
	dep := func(ctx context.Context) error {
		if depUp.TryLock() {
			depUp.Unlock()
			return nil
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	cache, err := holdfast.New(holdfast.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	var logs bytes.Buffer // written only by ServeHTTP on this goroutine
	h, err := httpapi.NewHandler(httpapi.Config{Store: db, Cache: cache, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Checks: []httpapi.Check{{Name: "redis", Func: dep}}})
	if err != nil {
		t.Fatal(err)
	}

	for range 20 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		want := `{"status":"not_ready","checks":{"database":{"status":"down","required":true},"redis":{"status":"down","required":false}}}` + "\n"
		if rec.Code != 503 || rec.Body.String() != want {
			t.Fatalf("readyz: %d %s, want 503 %s", rec.Code, rec.Body, want)
		}
	}
	log := logs.String()
	for _, want := range []string{
		`msg="readiness check failing" check=database error="` + dbErr + `" count=1`,
		`msg="readiness check failing" check=redis error="dial tcp ` + addr + `: connect: connection refused" count=1`,
	} {
		if strings.Count(log, want) != 1 {
			t.Errorf("log has %q %d times after 20 polls, want once:\n%s", want, strings.Count(log, want), log)
		}
	}
	depUp.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if !strings.Contains(rec.Body.String(), `"redis":{"status":"ok"`) {
		t.Errorf("readyz after the dependency came back: %s", rec.Body)
	}
	if want := `msg="readiness check ok again" check=redis failures_not_logged=19`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs.String())
	}
}
