// Package catalogtest is the one test suite every catalog.Store must pass,
// run from each implementation's tests the way log/slog's testing/slogtest
// is:
//
//	func TestStore(t *testing.T) {
//		catalogtest.Run(t, func(t *testing.T) catalog.Store {
//			db, err := sqlstore.Open(t.Context(), sqlstore.SQLite, filepath.Join(t.TempDir(), sqlstore.FileName), nil)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { db.Close() })
//			return db
//		})
//	}
//
// The suite checks every answer against an in-memory model of the generated
// catalog (catalog.Generate with catalog.DefaultSeed and catalog.SeedSize),
// so both stores are held to the spec in package catalog rather than to each
// other.
package catalogtest

import (
	"errors"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// Run runs the suite. newStore must return a new store holding exactly the
// freshly seeded default catalog, and arrange for it to be closed when the
// test ends; the suite calls it a few times and may itself call Close first,
// so Close must be safe to call twice. Read-only checks share one store;
// writes get another, each subtest on products no other subtest touches.
func Run(t *testing.T, newStore func(t *testing.T) catalog.Store) {
	m := newModel()
	t.Run("Read", func(t *testing.T) {
		s := newStore(t)
		t.Run("Product", func(t *testing.T) { testProduct(t, s, m) })
		t.Run("Stock", func(t *testing.T) { testStock(t, s, m) })
		t.Run("Products", func(t *testing.T) { testProducts(t, s, m) })
		t.Run("ProductsBounds", func(t *testing.T) { testProductsBounds(t, s, m) })
		t.Run("Search", func(t *testing.T) { testSearch(t, s, m) })
		t.Run("SearchBounds", func(t *testing.T) { testSearchBounds(t, s, m) })
		t.Run("Ping", func(t *testing.T) { testPing(t, s) })
		t.Run("CanceledContext", func(t *testing.T) { testCanceled(t, s) })
		t.Run("PoolStats", func(t *testing.T) { testPoolStats(t, s) })
	})
	t.Run("Write", func(t *testing.T) {
		s := newStore(t)
		free := &picker{m: m, used: map[int64]bool{}}
		t.Run("Update", func(t *testing.T) { testUpdate(t, s, m, free) })
		t.Run("UpdateConflict", func(t *testing.T) { testUpdateConflict(t, s, free) })
		t.Run("UpdateInvalid", func(t *testing.T) { testUpdateInvalid(t, s, m, free) })
		t.Run("UpdateVisibility", func(t *testing.T) { testUpdateVisibility(t, s, m, free) })
		t.Run("UpdateConcurrent", func(t *testing.T) { testUpdateConcurrent(t, s, free) })
		t.Run("Reserve", func(t *testing.T) { testReserve(t, s, free) })
		t.Run("ReserveConcurrent", func(t *testing.T) { testReserveConcurrent(t, s, free) })
	})
	t.Run("Close", func(t *testing.T) {
		s := newStore(t)
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Ping(t.Context()); err == nil {
			t.Error("Ping after Close returned nil, want an error")
		}
		if _, err := s.Product(t.Context(), 1); err == nil || errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("Product after Close: %v, want an error other than ErrNotFound", err)
		}
	})
}

// picker hands out ids of generated products no other write subtest has had.
type picker struct {
	m    *model
	mu   sync.Mutex
	used map[int64]bool
}

func (p *picker) pick(ok func(catalog.SeedRow) bool) catalog.SeedRow {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.m.find(func(r catalog.SeedRow) bool { return !p.used[r.Product.ID] && ok(r) })
	p.used[r.Product.ID] = true
	return r
}

// injections are inputs that would change a query built by pasting strings;
// a store must treat each as plain data.
var injections = []string{
	"' OR '1'='1",
	"'; DROP TABLE products; --",
	`" OR ""="`,
	"kitchen' --",
	"%",
	"_",
	"k%",
	"\\",
	"1; SELECT pg_sleep(10)",
	"') UNION SELECT * FROM stock --",
}

func equalProduct(a, b catalog.Product) bool {
	return a.ID == b.ID && a.Code == b.Code && a.Name == b.Name && a.Category == b.Category &&
		a.PriceCents == b.PriceCents && a.Status == b.Status && a.Version == b.Version &&
		a.UpdatedAt.Equal(b.UpdatedAt)
}

func checkProducts(t *testing.T, what string, got, want []catalog.Product) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got %d products %v, want %d %v", what, len(got), ids(got), len(want), ids(want))
		return
	}
	for i := range got {
		if !equalProduct(got[i], want[i]) {
			t.Errorf("%s: item %d is\n%+v, want\n%+v", what, i, got[i], want[i])
			return
		}
	}
}

func ids(ps []catalog.Product) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}
