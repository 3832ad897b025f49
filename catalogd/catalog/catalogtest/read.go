package catalogtest

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

func testProduct(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	for _, id := range []int64{1, 2, 777, 5000, catalog.SeedSize} {
		got, err := s.Product(ctx, id)
		if err != nil {
			t.Fatalf("Product(%d): %v", id, err)
		}
		if want := m.product(id); !equalProduct(got, want) {
			t.Errorf("Product(%d) =\n%+v, want\n%+v", id, got, want)
		}
		if got.UpdatedAt.Location() != time.UTC {
			t.Errorf("Product(%d).UpdatedAt is in %v, want UTC", id, got.UpdatedAt.Location())
		}
	}
	// Every status comes back from Product, hidden ones included.
	for _, st := range []catalog.Status{catalog.StatusHidden, catalog.StatusDiscontinued} {
		r := m.find(func(r catalog.SeedRow) bool { return r.Product.Status == st })
		got, err := s.Product(ctx, r.Product.ID)
		if err != nil || !equalProduct(got, r.Product) {
			t.Errorf("Product(%d) (%s) = %+v, %v; want %+v", r.Product.ID, st, got, err, r.Product)
		}
	}
	for _, id := range []int64{0, -1, catalog.SeedSize + 1, math.MaxInt64, math.MinInt64} {
		if _, err := s.Product(ctx, id); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("Product(%d): %v, want ErrNotFound", id, err)
		}
	}
}

func testStock(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	soldOut := m.find(func(r catalog.SeedRow) bool { return r.Stock.Available == 0 }).Product.ID
	for _, id := range []int64{1, 3, 4321, catalog.SeedSize, soldOut} {
		got, err := s.Stock(ctx, id)
		if err != nil {
			t.Fatalf("Stock(%d): %v", id, err)
		}
		want := m.stock(id)
		if got.ProductID != want.ProductID || got.Available != want.Available ||
			got.Version != want.Version || !got.UpdatedAt.Equal(want.UpdatedAt) {
			t.Errorf("Stock(%d) = %+v, want %+v", id, got, want)
		}
	}
	for _, id := range []int64{0, -7, catalog.SeedSize + 1, math.MaxInt64} {
		if _, err := s.Stock(ctx, id); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("Stock(%d): %v, want ErrNotFound", id, err)
		}
	}
}

func testProducts(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	sorts := []catalog.Sort{"", catalog.SortName, catalog.SortPrice, catalog.SortPriceDesc, catalog.SortUpdated}
	for _, cat := range []string{"", "kitchen", "toys"} {
		for _, sort := range sorts {
			for _, size := range []int{0, 7, catalog.MaxPageSize} {
				q, err := catalog.ListQuery{Category: cat, Sort: sort, Size: size}.Normalize()
				if err != nil {
					t.Fatal(err)
				}
				_, total := m.list(q)
				last := int((total + int64(q.Size) - 1) / int64(q.Size))
				for _, page := range []int{1, 2, last, last + 1} {
					q.Page = page
					got, err := s.Products(ctx, q)
					if err != nil {
						t.Fatalf("Products(%+v): %v", q, err)
					}
					want, total := m.list(q)
					if got.Total != total || got.Page != page || got.Size != q.Size {
						t.Errorf("Products(%+v): total %d page %d size %d, want %d %d %d",
							q, got.Total, got.Page, got.Size, total, page, q.Size)
					}
					checkProducts(t, "Products", got.Items, want)
				}
			}
		}
	}

	// The defaults: page 1, DefaultPageSize, sorted by name.
	got, err := s.Products(ctx, catalog.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want, total := m.list(catalog.ListQuery{Page: 1, Size: catalog.DefaultPageSize, Sort: catalog.SortName})
	if got.Total != total || got.Page != 1 || got.Size != catalog.DefaultPageSize {
		t.Errorf("Products({}): total %d page %d size %d", got.Total, got.Page, got.Size)
	}
	checkProducts(t, "Products({})", got.Items, want)

	// Walking every page of a category visits each active product in it
	// exactly once, whichever the order.
	for _, sort := range sorts[1:] {
		seen := map[int64]bool{}
		var n int64
		for page := 1; ; page++ {
			got, err := s.Products(ctx, catalog.ListQuery{Category: "garden", Sort: sort, Page: page, Size: 33})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Items) == 0 {
				n = got.Total
				break
			}
			for _, p := range got.Items {
				if seen[p.ID] || p.Category != "garden" || p.Status != catalog.StatusActive {
					t.Fatalf("sort %s page %d: product %+v seen twice or not an active garden product", sort, page, p)
				}
				seen[p.ID] = true
			}
		}
		if int64(len(seen)) != n || n == 0 {
			t.Errorf("sort %s: walked %d products, total says %d", sort, len(seen), n)
		}
	}

	// A category no product has is an empty page, not an error; so is
	// every injection attempt, which must match nothing.
	for _, cat := range append([]string{"no-such-category", "KITCHEN", "kitchen "}, injections...) {
		got, err := s.Products(ctx, catalog.ListQuery{Category: cat})
		if err != nil {
			t.Errorf("Products(category %q): %v", cat, err)
			continue
		}
		if got.Total != 0 || len(got.Items) != 0 {
			t.Errorf("Products(category %q): total %d, %d items; want none", cat, got.Total, len(got.Items))
		}
	}
}

func testProductsBounds(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	bad := []catalog.ListQuery{
		{Page: -1},
		{Page: catalog.MaxPage + 1},
		{Page: math.MaxInt},
		{Size: -1},
		{Size: catalog.MaxPageSize + 1},
		{Sort: "bogus"},
		{Sort: "name; DROP TABLE products"},
		{Sort: "price DESC"},
		{Sort: "Name"},
		{Category: strings.Repeat("x", catalog.MaxCategoryLen+1)},
		{Category: "bad\xffutf8"},
		{Category: "nul\x00"},
	}
	for _, q := range bad {
		if _, err := s.Products(ctx, q); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("Products(%+v): %v, want ErrInvalid", q, err)
		}
	}
	// The largest page allowed is answered, empty.
	got, err := s.Products(ctx, catalog.ListQuery{Page: catalog.MaxPage, Size: catalog.MaxPageSize})
	if err != nil || len(got.Items) != 0 {
		t.Errorf("Products(last allowed page): %d items, %v; want 0, nil", len(got.Items), err)
	}
	_, total := m.list(catalog.ListQuery{Page: 1, Size: 1})
	if got.Total != total {
		t.Errorf("Products(last allowed page): total %d, want %d", got.Total, total)
	}
}

func testSearch(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	hidden := m.find(func(r catalog.SeedRow) bool { return r.Product.Status == catalog.StatusHidden }).Product
	prefixes := []string{
		"compact", "COMPACT", "  Compact", "cOmPaCt", "compact b", "Compact Black",
		"heavy-duty", "s", "p", "pro", "pro ",
		"P00012", "p00012", "p0001", "P000123", "P010000", "P01", "P1",
		hidden.Code, "zzz", "ü", "é", "\U0010FFFF",
	}
	for _, p := range append(prefixes, injections...) {
		got, err := s.Search(ctx, p, 10)
		if err != nil {
			t.Errorf("Search(%q): %v", p, err)
			continue
		}
		checkProducts(t, "Search("+p+")", got, m.search(p, 10))
	}
	// Case does not matter, for names and for codes.
	a, _ := s.Search(ctx, "midnight", 20)
	b, _ := s.Search(ctx, "MIDNIGHT", 20)
	if len(a) == 0 || !slices.Equal(ids(a), ids(b)) {
		t.Errorf(`Search("midnight") = %v, Search("MIDNIGHT") = %v; want equal, non-empty`, ids(a), ids(b))
	}
	// A code prefix finds the codes under it, in code order.
	got, err := s.Search(ctx, "p00002", 50)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got {
		if !strings.HasPrefix(p.Code, "P00002") || (i > 0 && p.Code <= got[i-1].Code) {
			t.Errorf("Search(p00002) item %d: %s out of place in %v", i, p.Code, ids(got))
		}
	}
	if len(got) == 0 {
		t.Error("Search(p00002) found nothing")
	}
	// A hidden product is not found even by its exact code.
	got, _ = s.Search(ctx, hidden.Code, 10)
	if slices.Contains(ids(got), hidden.ID) {
		t.Errorf("Search(%s) returned hidden product %d", hidden.Code, hidden.ID)
	}
}

func testSearchBounds(t *testing.T, s catalog.Store, m *model) {
	ctx := t.Context()
	for _, c := range []struct {
		limit, want int
	}{
		{0, catalog.DefaultSearchLimit},
		{-5, catalog.DefaultSearchLimit},
		{1, 1},
		{3, 3},
		{catalog.MaxSearchLimit, catalog.MaxSearchLimit},
		{catalog.MaxSearchLimit + 1, catalog.MaxSearchLimit},
		{math.MaxInt, catalog.MaxSearchLimit},
	} {
		// "p" matches hundreds of names and every code.
		got, err := s.Search(ctx, "p", c.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.want {
			t.Errorf("Search(p, %d): %d results, want %d", c.limit, len(got), c.want)
		}
		checkProducts(t, "Search(p)", got, m.search("p", c.limit))
	}
	for _, p := range []string{"", "   ", "\t\n"} {
		got, err := s.Search(ctx, p, 10)
		if err != nil || len(got) != 0 {
			t.Errorf("Search(%q) = %d results, %v; want none, nil", p, len(got), err)
		}
	}
	for _, p := range []string{strings.Repeat("a", catalog.MaxPrefixLen+1), "bad\xff", "nul\x00"} {
		if _, err := s.Search(ctx, p, 10); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("Search(%q): %v, want ErrInvalid", p, err)
		}
	}
	// MaxPrefixLen runes is allowed, even when each is several bytes.
	if _, err := s.Search(ctx, strings.Repeat("é", catalog.MaxPrefixLen), 10); err != nil {
		t.Errorf("Search(%d × é): %v", catalog.MaxPrefixLen, err)
	}
}

func testPing(t *testing.T, s catalog.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

// testPoolStats checks a store's pool statistics, if it reports any: after
// the reads above, every pool has a limit and at least one connection.
func testPoolStats(t *testing.T, s catalog.Store) {
	pr, ok := s.(catalog.PoolReporter)
	if !ok {
		t.Skip("the store keeps no pool")
	}
	stats := pr.PoolStats()
	if len(stats) == 0 {
		t.Fatal("PoolStats returned no pools")
	}
	for _, p := range stats {
		if p.Name == "" || p.MaxOpen < 1 || p.Open < 1 || p.InUse+p.Idle != p.Open {
			t.Errorf("pool stats %+v", p)
		}
	}
}

func testCanceled(t *testing.T, s catalog.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Product(ctx, 1); err == nil || errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("Product with a canceled context: %v, want a context error", err)
	}
	if _, err := s.Reserve(ctx, 1, 1); err == nil {
		t.Error("Reserve with a canceled context succeeded")
	}
}
