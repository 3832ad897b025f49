package catalogtest

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

func testUpdate(t *testing.T, s catalog.Store, m *model, free *picker) {
	ctx := t.Context()
	before := time.Now().Add(-time.Minute)
	r := free.pick(func(r catalog.SeedRow) bool { return r.Product.Status == catalog.StatusActive })
	u := catalog.ProductUpdate{Name: "Renamed Widget", PriceCents: 12345, Status: catalog.StatusDiscontinued, Category: "office"}
	got, err := s.UpdateProduct(ctx, r.Product.ID, 1, u)
	if err != nil {
		t.Fatalf("UpdateProduct: %v", err)
	}
	if got.ID != r.Product.ID || got.Code != r.Product.Code || got.Name != u.Name || got.PriceCents != u.PriceCents ||
		got.Status != u.Status || got.Category != u.Category || got.Version != 2 {
		t.Errorf("UpdateProduct returned %+v for update %+v of %+v", got, u, r.Product)
	}
	if got.UpdatedAt.Before(before) || got.UpdatedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("UpdateProduct: UpdatedAt %v is not about now", got.UpdatedAt)
	}
	again, err := s.Product(ctx, r.Product.ID)
	if err != nil || !equalProduct(again, got) {
		t.Errorf("Product after update = %+v, %v; want %+v", again, err, got)
	}
	// A second update with the new version works and bumps it again.
	u.Name = "Robert'); DROP TABLE products;--"
	got, err = s.UpdateProduct(ctx, r.Product.ID, 2, u)
	if err != nil || got.Version != 3 || got.Name != u.Name {
		t.Fatalf("second UpdateProduct = %+v, %v; want version 3, name kept verbatim", got, err)
	}
	if again, err := s.Product(ctx, r.Product.ID); err != nil || again.Name != u.Name {
		t.Errorf("Product after update = %+v, %v; want the injection-looking name verbatim", again, err)
	}
	// The neighbours are untouched.
	for _, id := range []int64{r.Product.ID - 1, r.Product.ID + 1} {
		if id < 1 {
			continue
		}
		p, err := s.Product(ctx, id)
		if err != nil || !equalProduct(p, m.product(id)) {
			t.Errorf("Product(%d) changed by an update of %d: %+v, %v", id, r.Product.ID, p, err)
		}
	}
	// Unknown ids are ErrNotFound, whatever version is expected.
	for _, id := range []int64{0, catalog.SeedSize + 1, math.MaxInt64} {
		if _, err := s.UpdateProduct(ctx, id, 1, u); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("UpdateProduct(%d): %v, want ErrNotFound", id, err)
		}
	}
}

func testUpdateConflict(t *testing.T, s catalog.Store, free *picker) {
	ctx := t.Context()
	r := free.pick(func(catalog.SeedRow) bool { return true })
	u := catalog.ProductUpdate{Name: "First", PriceCents: 100, Status: catalog.StatusActive, Category: "toys"}
	first, err := s.UpdateProduct(ctx, r.Product.ID, 1, u)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{1, 0, 3, -1, math.MaxInt64} {
		u2 := catalog.ProductUpdate{Name: "Second", PriceCents: 200, Status: catalog.StatusHidden, Category: "books"}
		if _, err := s.UpdateProduct(ctx, r.Product.ID, v, u2); !errors.Is(err, catalog.ErrConflict) {
			t.Errorf("UpdateProduct with stale version %d: %v, want ErrConflict", v, err)
		}
	}
	if p, err := s.Product(ctx, r.Product.ID); err != nil || !equalProduct(p, first) {
		t.Errorf("Product after rejected updates = %+v, %v; want %+v", p, err, first)
	}
}

func testUpdateInvalid(t *testing.T, s catalog.Store, m *model, free *picker) {
	ctx := t.Context()
	r := free.pick(func(catalog.SeedRow) bool { return true })
	ok := catalog.ProductUpdate{Name: "Fine", PriceCents: 1, Status: catalog.StatusActive, Category: "toys"}
	bad := []func(u *catalog.ProductUpdate){
		func(u *catalog.ProductUpdate) { u.Name = "" },
		func(u *catalog.ProductUpdate) { u.Name = "   " },
		func(u *catalog.ProductUpdate) { u.Name = strings.Repeat("n", catalog.MaxNameLen+1) },
		func(u *catalog.ProductUpdate) { u.Name = "bad\xff" },
		func(u *catalog.ProductUpdate) { u.Name = "nul\x00" },
		func(u *catalog.ProductUpdate) { u.PriceCents = -1 },
		func(u *catalog.ProductUpdate) { u.PriceCents = catalog.MaxPriceCents + 1 },
		func(u *catalog.ProductUpdate) { u.Status = "" },
		func(u *catalog.ProductUpdate) { u.Status = "active' --" },
		func(u *catalog.ProductUpdate) { u.Category = "" },
		func(u *catalog.ProductUpdate) { u.Category = strings.Repeat("c", catalog.MaxCategoryLen+1) },
	}
	for i, f := range bad {
		u := ok
		f(&u)
		if _, err := s.UpdateProduct(ctx, r.Product.ID, 1, u); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("bad update %d %+v: %v, want ErrInvalid", i, u, err)
		}
	}
	if p, err := s.Product(ctx, r.Product.ID); err != nil || !equalProduct(p, m.product(r.Product.ID)) {
		t.Errorf("Product after invalid updates = %+v, %v; want it unchanged", p, err)
	}
}

// testUpdateVisibility checks that an update reaches the list and search
// indexes: a new name is found by its prefix, a new category moves the
// product, and hiding it removes it from both.
func testUpdateVisibility(t *testing.T, s catalog.Store, m *model, free *picker) {
	ctx := t.Context()
	r := free.pick(func(r catalog.SeedRow) bool {
		return r.Product.Status == catalog.StatusActive && r.Product.Category == "pets"
	})
	count := func(cat string) int64 {
		t.Helper()
		p, err := s.Products(ctx, catalog.ListQuery{Category: cat, Size: 1})
		if err != nil {
			t.Fatal(err)
		}
		return p.Total
	}
	pets, books := count("pets"), count("books")
	u := catalog.ProductUpdate{Name: "Zyxwvut Ünïcode Lamp", PriceCents: 999, Status: catalog.StatusActive, Category: "books"}
	if _, err := s.UpdateProduct(ctx, r.Product.ID, 1, u); err != nil {
		t.Fatal(err)
	}
	if count("pets") != pets-1 || count("books") != books+1 {
		t.Errorf("after moving a product from pets to books: pets %d→%d, books %d→%d", pets, count("pets"), books, count("books"))
	}
	for _, p := range []string{"zyxwvut", "ZYXWVUT ÜNÏ", "zyxwvut ünïcode lamp", r.Product.Code} {
		got, err := s.Search(ctx, p, 5)
		if err != nil || len(got) != 1 || got[0].ID != r.Product.ID || got[0].Name != u.Name {
			t.Errorf("Search(%q) after rename = %+v, %v; want just product %d", p, got, err, r.Product.ID)
		}
	}
	u.Status = catalog.StatusHidden
	if _, err := s.UpdateProduct(ctx, r.Product.ID, 2, u); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Search(ctx, "zyxwvut", 5); err != nil || len(got) != 0 {
		t.Errorf("Search after hiding = %v, %v; want nothing", ids(got), err)
	}
	if count("books") != books {
		t.Errorf("books total after hiding: %d, want %d", count("books"), books)
	}
}

// testUpdateConcurrent races many updates with the same expected version:
// exactly one wins.
func testUpdateConcurrent(t *testing.T, s catalog.Store, free *picker) {
	ctx := t.Context()
	r := free.pick(func(catalog.SeedRow) bool { return true })
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			u := catalog.ProductUpdate{Name: "Racer", PriceCents: int64(i), Status: catalog.StatusActive, Category: "sports"}
			_, errs[i] = s.UpdateProduct(ctx, r.Product.ID, 1, u)
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, catalog.ErrConflict):
			t.Errorf("concurrent UpdateProduct: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d updates with the same expected version won, want exactly 1", wins, n)
	}
	if p, _ := s.Product(ctx, r.Product.ID); p.Version != 2 {
		t.Errorf("version after the race: %d, want 2", p.Version)
	}
}

func testReserve(t *testing.T, s catalog.Store, free *picker) {
	ctx := t.Context()
	r := free.pick(func(r catalog.SeedRow) bool { return r.Stock.Available >= 10 })
	id, avail := r.Product.ID, r.Stock.Available
	st, err := s.Reserve(ctx, id, 3)
	if err != nil || st.ProductID != id || st.Available != avail-3 || st.Version != 2 {
		t.Fatalf("Reserve(%d, 3) = %+v, %v; want %d available, version 2", id, st, err, avail-3)
	}
	if st.UpdatedAt.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("Reserve: UpdatedAt %v is not about now", st.UpdatedAt)
	}
	if got, err := s.Stock(ctx, id); err != nil || got.Available != avail-3 || got.Version != 2 {
		t.Errorf("Stock after Reserve = %+v, %v", got, err)
	}
	// More than is left: refused, nothing taken.
	if _, err := s.Reserve(ctx, id, avail-2); !errors.Is(err, catalog.ErrInsufficientStock) {
		t.Errorf("Reserve(%d, %d) with %d left: %v, want ErrInsufficientStock", id, avail-2, avail-3, err)
	}
	if _, err := s.Reserve(ctx, id, math.MaxInt64); !errors.Is(err, catalog.ErrInsufficientStock) {
		t.Errorf("Reserve(MaxInt64): %v, want ErrInsufficientStock", err)
	}
	// Exactly what is left: allowed, down to zero.
	st, err = s.Reserve(ctx, id, avail-3)
	if err != nil || st.Available != 0 || st.Version != 3 {
		t.Errorf("Reserve(rest) = %+v, %v; want 0 available, version 3", st, err)
	}
	if _, err := s.Reserve(ctx, id, 1); !errors.Is(err, catalog.ErrInsufficientStock) {
		t.Errorf("Reserve(1) when sold out: %v, want ErrInsufficientStock", err)
	}
	if got, _ := s.Stock(ctx, id); got.Available != 0 || got.Version != 3 {
		t.Errorf("Stock after refused reservations = %+v, want 0 available, version 3", got)
	}
	// A product generated sold out.
	sold := free.pick(func(r catalog.SeedRow) bool { return r.Stock.Available == 0 })
	if _, err := s.Reserve(ctx, sold.Product.ID, 1); !errors.Is(err, catalog.ErrInsufficientStock) {
		t.Errorf("Reserve of sold-out %d: %v, want ErrInsufficientStock", sold.Product.ID, err)
	}
	for _, q := range []int64{0, -1, math.MinInt64} {
		if _, err := s.Reserve(ctx, 1, q); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("Reserve(1, %d): %v, want ErrInvalid", q, err)
		}
	}
	for _, id := range []int64{0, -1, catalog.SeedSize + 1} {
		if _, err := s.Reserve(ctx, id, 1); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("Reserve(%d, 1): %v, want ErrNotFound", id, err)
		}
	}
}

// testReserveConcurrent has many goroutines reserve one unit at a time from
// one product until it is sold out. Every unit must be sold exactly once:
// no oversell (the count never goes below zero, successes never exceed the
// stock) and no lost update (successes add up to what the row lost).
func testReserveConcurrent(t *testing.T, s catalog.Store, free *picker) {
	ctx := t.Context()
	r := free.pick(func(r catalog.SeedRow) bool { return r.Stock.Available >= 30 && r.Stock.Available <= 60 })
	id, avail := r.Product.ID, r.Stock.Available
	const workers = 32
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		sold      int64
		conflicts int
	)
	for range workers {
		wg.Go(func() {
			// Each worker gives up after a bounded number of calls, so a
			// store that never says "sold out" fails instead of hanging.
			for range 4 * avail {
				st, err := s.Reserve(ctx, id, 1)
				mu.Lock()
				switch {
				case err == nil:
					sold++
					if st.Available < 0 {
						t.Errorf("Reserve returned %d available", st.Available)
					}
				case errors.Is(err, catalog.ErrConflict):
					conflicts++
				case errors.Is(err, catalog.ErrInsufficientStock):
					mu.Unlock()
					return
				default:
					t.Errorf("Reserve: %v", err)
					mu.Unlock()
					return
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	st, err := s.Stock(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sold != avail || st.Available != 0 {
		t.Errorf("%d workers sold %d of %d units, %d left (%d conflicts); want all sold exactly once",
			workers, sold, avail, st.Available, conflicts)
	}
	if st.Version != 1+sold {
		t.Errorf("stock version %d after %d reservations, want %d", st.Version, sold, 1+sold)
	}
	t.Logf("%d workers sold %d units with %d ErrConflict give-ups", workers, sold, conflicts)
}
