package httpapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/catalogd/internal/pgtest"
	"github.com/holdfast-dev/holdfast/catalogd/sqlstore"
	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// outageEnv is a Handler over a real store, logging to a sink.
func outageEnv(t *testing.T, store catalog.Store) (*httpapi.Handler, *logSink) {
	t.Helper()
	cache, err := holdfast.New(holdfast.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	logs := &logSink{}
	h, err := httpapi.NewHandler(httpapi.Config{Store: store, Cache: cache, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return h, logs
}

func serve(h http.Handler, target string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

// wantUnavailable checks that rec is a 503 with Retry-After and the JSON
// error "unavailable", and that it names none of secrets.
func wantUnavailable(t *testing.T, rec *httptest.ResponseRecorder, logs *logSink, secrets ...string) {
	t.Helper()
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s\nlog:\n%s", rec.Code, rec.Body, logs)
	}
	if code := errorCode(t, rec, http.StatusServiceUnavailable); code != "unavailable" {
		t.Errorf("code %q, want unavailable", code)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	for _, s := range secrets {
		if strings.Contains(rec.Body.String(), s) {
			t.Errorf("body names %q: %s", s, rec.Body)
		}
	}
}

// TestPostgresDownIs503: with PostgreSQL gone (every connection to it cut,
// new ones refused), a product never read before, a list page and a search
// are 503 with Retry-After and a JSON body, not 500, and so is a
// reservation; a product read before is still served from the cache.
// Neither the bodies nor the log name the database's user, database or
// address, and nothing is logged as an error.
func TestPostgresDownIs503(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// A proxy stands for the server, which other tests share: cut, it is
	// gone to this test's clients while it runs on.
	proxy := redistest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.PostgreSQL, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h, logs := outageEnv(t, db)
	if rec := serve(h, "/v1/products/1"); rec.Code != http.StatusOK {
		t.Fatalf("before the outage: %d %s", rec.Code, rec.Body)
	}

	proxy.Cut()
	// The role's name is "holdfast", which is also every holdfast error's
	// prefix: look for it as the DSN's parts are quoted.
	user := u.User.Username()
	secrets := []string{"user=" + user, `"` + user + `"`, strings.TrimPrefix(u.Path, "/"), u.Host, "user=", "database="}
	for _, target := range []string{"/v1/products/2", "/v1/products?category=audio", "/v1/search?q=red", "/v1/products/3"} {
		wantUnavailable(t, serve(h, target), logs, secrets...)
	}
	if rec := serve(h, "/v1/products/1"); rec.Code != http.StatusOK {
		t.Errorf("a cached product during the outage: %d %s", rec.Code, rec.Body)
	}
	// A write cannot reach the database either.
	req := httptest.NewRequest(http.MethodPost, "/v1/products/1/reserve", strings.NewReader(`{"quantity":1}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	wantUnavailable(t, rec, logs, secrets...)
	log := logs.String()
	if n := logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d error lines for an outage:\n%s", n, log)
	}
	if n := logs.count(`msg="request rejected"`); n != 1 {
		t.Errorf("%d rejection lines, want 1 (the rest are counted):\n%s", n, log)
	}
	for _, s := range secrets {
		if strings.Contains(log, s) {
			t.Errorf("log names %q:\n%s", s, log)
		}
	}

	// The first read after the cut found its pooled connection closed;
	// the later ones dialled, and pgx's dial error names the user, the
	// database and the address. The rejection log writes only the first
	// error at once, so send a dial error through a Handler of its own.
	var dialErr error
	for range 10 {
		if _, err := db.Product(ctx, 1); err != nil && strings.Contains(err.Error(), "user=") {
			dialErr = err
			break
		}
	}
	if dialErr == nil {
		t.Fatal("no dial error from the store after the cut")
	}
	logs = &logSink{}
	e := newEnv(t, setup{logger: slog.New(slog.NewTextHandler(logs, nil))})
	e.store.setReadErr(dialErr)
	wantUnavailable(t, e.get("/v1/products/1"), logs, secrets...)
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the log lost the cause:\n%s", logs)
	}
	for _, s := range append(secrets, "127.0.0.1") {
		if strings.Contains(logs.String(), s) {
			t.Errorf("log names %q:\n%s", s, logs)
		}
	}
}

// TestClosedStoreIs503: a store whose pool was really closed cannot be
// reached either: 503, not 500.
func TestClosedStoreIs503(t *testing.T) {
	db, err := sqlstore.Open(context.Background(), sqlstore.SQLite, seededSQLite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, logs := outageEnv(t, db)
	if rec := serve(h, "/v1/products/1"); rec.Code != http.StatusOK {
		t.Fatalf("before closing: %d %s", rec.Code, rec.Body)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wantUnavailable(t, serve(h, "/v1/products/2"), logs)
	if n := logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d error lines:\n%s", n, logs)
	}
}

// TestUnexpectedErrorStays500: an error that says nothing of reaching the
// database is still a 500, logged as an error.
func TestUnexpectedErrorStays500(t *testing.T) {
	logs := &logSink{}
	e := newEnv(t, setup{logger: slog.New(slog.NewTextHandler(logs, nil))})
	e.store.setReadErr(errors.New("row 7: column price_cents: converting NULL to int64 is unsupported"))
	if code := errorCode(t, e.get("/v1/products/2"), http.StatusInternalServerError); code != "internal" {
		t.Errorf("code %q", code)
	}
	if n := logs.count("level=ERROR"); n != 1 {
		t.Errorf("%d error lines, want 1:\n%s", n, logs)
	}
}
