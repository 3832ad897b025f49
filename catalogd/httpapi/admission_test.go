package httpapi_test

import (
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

// TestQueriesInFlightCapped: with two searches in flight and a cap of two,
// a third waits 10 ms for a place and is then refused with the overload's
// 503 JSON and Retry-After, without reaching the cache or the store, and
// logged as the limiter's rejections are (one line, then counted). Product
// and stock reads and list pages, which the search cap does not cover,
// are served meanwhile; once the searches end, searches are served again.
func TestQueriesInFlightCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logSink{}
		e := newEnv(t, setup{maxLoads: 16, maxQueries: 2, logger: slog.New(slog.NewTextHandler(logs, nil))})
		e.store.searchEntered, e.store.searchRelease = make(chan struct{}), make(chan struct{})
		done := make(chan int, 2)
		for _, q := range []string{"red", "blue"} {
			go func() { done <- e.get("/v1/search?q=" + q).Code }()
			<-e.store.searchEntered
		}

		start := time.Now()
		for i := range 100 {
			rec := e.get("/v1/search?q=green" + strconv.Itoa(i))
			if code := errorCode(t, rec, 503); code != "overloaded" {
				t.Fatalf("search past the cap: code %q, want overloaded", code)
			}
			if ra := rec.Header().Get("Retry-After"); ra != "1" {
				t.Fatalf("Retry-After %q, want 1", ra)
			}
		}
		if waited := time.Since(start); waited != 100*10*time.Millisecond {
			t.Errorf("100 refusals took %v, want each to wait 10 ms for a place", waited)
		}
		if n := e.store.count("search"); n != 2 {
			t.Errorf("the store saw %d searches, want the 2 in flight: refused ones must not reach it", n)
		}
		if n := logs.count(`msg="request rejected" code=overloaded method=GET path=/v1/search`); n != 1 || logs.count("level=WARN") != 1 {
			t.Errorf("want one warn line for 100 refusals:\n%s", logs)
		}

		for id := 1; id <= 5; id++ {
			if rec := e.get("/v1/products/" + strconv.Itoa(id)); rec.Code != 200 {
				t.Errorf("product %d with the search cap full: %d %s", id, rec.Code, rec.Body)
			}
		}
		if rec := e.get("/v1/products?category=kitchen"); rec.Code != 200 {
			t.Errorf("list page with the search cap full: %d %s", rec.Code, rec.Body)
		}

		close(e.store.searchRelease)
		for range 2 {
			if code := <-done; code != 200 {
				t.Errorf("a search in flight ended %d", code)
			}
		}
		if rec := e.get("/v1/search?q=green"); rec.Code != 200 {
			t.Errorf("search after the cap emptied: %d %s", rec.Code, rec.Body)
		}
	})
}

// TestQueryPastTheCapWaitsForAPlace: a search that finds the cap full is
// served when a place comes free within its 10 ms wait.
func TestQueryPastTheCapWaitsForAPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{maxLoads: 16, maxQueries: 1})
		e.store.searchEntered, e.store.searchRelease = make(chan struct{}), make(chan struct{})
		first := make(chan int, 1)
		go func() { first <- e.get("/v1/search?q=red").Code }()
		<-e.store.searchEntered
		second := make(chan int, 1)
		go func() { second <- e.get("/v1/search?q=blue").Code }()
		synctest.Wait() // the second waits for a place
		time.Sleep(5 * time.Millisecond)
		close(e.store.searchRelease)
		if a, b := <-first, <-second; a != 200 || b != 200 {
			t.Errorf("first %d, second %d; want both served", a, b)
		}
	})
}

// TestQueriesInFlightUncapped: a negative cap admits every search.
func TestQueriesInFlightUncapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{maxLoads: 64, maxQueries: -1})
		fillSearches(t, e, 40)
	})
}

// TestDefaultQueriesInFlight: the default cap admits 8 × GOMAXPROCS
// searches at once, and refuses the next.
func TestDefaultQueriesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEnv(t, setup{maxLoads: 1000})
		fillSearches(t, e, 8*runtime.GOMAXPROCS(0), func() {
			if code := errorCode(t, e.get("/v1/search?q=over"), 503); code != "overloaded" {
				t.Errorf("search past the default cap: code %q", code)
			}
		})
	})
}

// fillSearches puts n distinct searches in flight, every one of them
// reaching the store, runs then while they are, and ends them: each must
// then be served.
func fillSearches(t *testing.T, e *env, n int, then ...func()) {
	t.Helper()
	e.store.searchEntered, e.store.searchRelease = make(chan struct{}), make(chan struct{})
	done := make(chan int, n)
	for i := range n {
		go func() { done <- e.get("/v1/search?q=k" + strconv.Itoa(i)).Code }()
		<-e.store.searchEntered
	}
	for _, f := range then {
		f()
	}
	close(e.store.searchRelease)
	for range n {
		if code := <-done; code != 200 {
			t.Errorf("a search in flight ended %d", code)
		}
	}
}
