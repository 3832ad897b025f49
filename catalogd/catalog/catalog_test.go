package catalog_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

func TestGenerateDeterministic(t *testing.T) {
	a := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	b := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	c := catalog.Generate(catalog.DefaultSeed+1, catalog.SeedSize)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("row %d differs between two runs with one seed: %+v, %+v", i, a[i], b[i])
		}
		if a[i].Product.Name == c[i].Product.Name {
			same++
		}
	}
	if same > len(a)/10 {
		t.Errorf("seeds %d and %d share %d of %d names", catalog.DefaultSeed, catalog.DefaultSeed+1, same, len(a))
	}
	// Pin a few values, so that a change to the generator, which would
	// change every store's seed and the suite's expectations, is seen.
	if got := a[0].Product; got.Code != "P000001" || got.ID != 1 || got.Version != 1 {
		t.Errorf("first product = %+v", got)
	}
	if got := a[catalog.SeedSize-1].Product.Code; got != "P010000" {
		t.Errorf("last code = %s, want P010000", got)
	}
}

func TestGenerateShape(t *testing.T) {
	rows := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	cats := map[string]int{}
	status := map[catalog.Status]int{}
	soldOut := 0
	for _, r := range rows {
		p := r.Product
		cats[p.Category]++
		status[p.Status]++
		if r.Stock.Available == 0 {
			soldOut++
		}
		if r.Stock.ProductID != p.ID || r.Stock.Available < 0 || r.Stock.Available > 500 {
			t.Fatalf("bad stock %+v for %+v", r.Stock, p)
		}
		u := catalog.ProductUpdate{Name: p.Name, PriceCents: p.PriceCents, Status: p.Status, Category: p.Category}
		if err := u.Validate(); err != nil {
			t.Fatalf("generated product %+v does not pass validation: %v", p, err)
		}
		if p.PriceCents%100 != 99 || !p.UpdatedAt.Before(catalog.SeedEpoch.Add(1)) || p.UpdatedAt.Before(catalog.SeedEpoch.AddDate(-1, 0, -1)) {
			t.Fatalf("generated product %+v: price or time out of range", p)
		}
	}
	if len(cats) != len(catalog.Categories()) || len(cats) != 20 {
		t.Errorf("%d categories used, want 20", len(cats))
	}
	for c, n := range cats {
		if n < 300 {
			t.Errorf("category %s has only %d products", c, n)
		}
	}
	if status[catalog.StatusActive] < 9000 || status[catalog.StatusHidden] == 0 || status[catalog.StatusDiscontinued] == 0 {
		t.Errorf("statuses %v: want mostly active, some of each other", status)
	}
	if soldOut < 500 || soldOut > 1500 {
		t.Errorf("%d sold out, want about one in ten", soldOut)
	}
}

func TestNormalize(t *testing.T) {
	q, err := catalog.ListQuery{}.Normalize()
	if err != nil || q != (catalog.ListQuery{Page: 1, Size: catalog.DefaultPageSize, Sort: catalog.SortName}) {
		t.Errorf("Normalize({}) = %+v, %v", q, err)
	}
	for _, bad := range []catalog.ListQuery{
		{Page: -1}, {Page: catalog.MaxPage + 1}, {Size: -1}, {Size: catalog.MaxPageSize + 1},
		{Sort: "id"}, {Sort: "name "}, {Category: "\xff"}, {Category: "a\x00"},
		{Category: strings.Repeat("é", catalog.MaxCategoryLen+1)},
	} {
		if _, err := bad.Normalize(); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("Normalize(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := (catalog.ListQuery{Category: strings.Repeat("é", catalog.MaxCategoryLen)}).Normalize(); err != nil {
		t.Errorf("a category of MaxCategoryLen runes: %v", err)
	}
}

func TestPrefixRange(t *testing.T) {
	for _, c := range []struct{ p, hi string }{
		{"a", "b"},
		{"ab", "ac"},
		{"a\u007f", "a\u0080"},
		{"\ud7ff", "\ue000"},
		{"x\U0010FFFF", "y"},
		{"é", "ê"},
	} {
		lo, hi, ok := catalog.PrefixRange(c.p)
		if lo != c.p || hi != c.hi || !ok {
			t.Errorf("PrefixRange(%q) = %q, %q, %v; want %q, %q, true", c.p, lo, hi, ok, c.p, c.hi)
		}
	}
	if _, _, ok := catalog.PrefixRange("\U0010FFFF\U0010FFFF"); ok {
		t.Error("PrefixRange(all U+10FFFF) is bounded")
	}
}

// FuzzPrefixRange checks the property the stores rely on: for valid UTF-8,
// s is in [lo, hi) exactly when s starts with p.
func FuzzPrefixRange(f *testing.F) {
	f.Add("ab", "abc")
	f.Add("a\U0010FFFF", "a\U0010FFFFz")
	f.Add("\ud7ff", "\ue000")
	f.Add("p00", "p001")
	f.Fuzz(func(t *testing.T, p, s string) {
		if !utf8.ValidString(p) || !utf8.ValidString(s) {
			return
		}
		lo, hi, ok := catalog.PrefixRange(p)
		in := s >= lo && (!ok || s < hi)
		if in != strings.HasPrefix(s, p) {
			t.Errorf("p=%q s=%q: in range [%q, %q) %v, HasPrefix %v", p, s, lo, hi, in, !in)
		}
	})
}

func TestNormalizePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"  Compact ": "compact ",
		"P000123":    "p000123",
		"ÜBER":       "über",
		"":           "",
		"\t":         "",
	} {
		if got, err := catalog.NormalizePrefix(in); got != want || err != nil {
			t.Errorf("NormalizePrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"\xff", "a\x00", strings.Repeat("x", catalog.MaxPrefixLen+1)} {
		if _, err := catalog.NormalizePrefix(bad); !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("NormalizePrefix(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func ExamplePrefixRange() {
	p, _ := catalog.NormalizePrefix("  Midnight S")
	lo, hi, _ := catalog.PrefixRange(p)
	fmt.Printf("name_key >= %q AND name_key < %q\n", lo, hi)
	// Output: name_key >= "midnight s" AND name_key < "midnight t"
}

func ExampleListQuery_Normalize() {
	q, err := catalog.ListQuery{Category: "toys", Sort: catalog.SortPriceDesc}.Normalize()
	fmt.Printf("%+v %v\n", q, err)
	_, err = catalog.ListQuery{Sort: "price; DROP TABLE products"}.Normalize()
	fmt.Println(errors.Is(err, catalog.ErrInvalid))
	// Output:
	// {Category:toys Page:1 Size:20 Sort:-price} <nil>
	// true
}
