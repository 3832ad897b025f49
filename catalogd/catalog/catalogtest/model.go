package catalogtest

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// model is the generated catalog held in memory, with the list and search
// semantics of catalog.Store written the plain way. The suite compares every
// store answer with the model's, so a store's SQL is checked against the
// spec, not against another store.
type model struct {
	rows []catalog.SeedRow
	keys map[int64]string // SearchKey(name), computed once: sorting 10,000 under -race is slow

	mu     sync.Mutex
	sorted map[catalog.ListQuery][]catalog.Product // by Category and Sort only
}

func newModel() *model {
	m := &model{
		rows:   catalog.Generate(catalog.DefaultSeed, catalog.SeedSize),
		keys:   map[int64]string{},
		sorted: map[catalog.ListQuery][]catalog.Product{},
	}
	for _, r := range m.rows {
		m.keys[r.Product.ID] = catalog.SearchKey(r.Product.Name)
	}
	return m
}

func (m *model) product(id int64) catalog.Product { return m.rows[id-1].Product }
func (m *model) stock(id int64) catalog.Stock     { return m.rows[id-1].Stock }

// list returns the page of q (normalized) and the total.
func (m *model) list(q catalog.ListQuery) ([]catalog.Product, int64) {
	ps := m.all(q.Category, q.Sort)
	total := int64(len(ps))
	lo := min(q.Offset(), len(ps))
	hi := min(lo+q.Size, len(ps))
	return ps[lo:hi], total
}

// all returns every active product in category (all for "") in order s.
func (m *model) all(category string, s catalog.Sort) []catalog.Product {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := catalog.ListQuery{Category: category, Sort: s}
	if ps, ok := m.sorted[k]; ok {
		return ps
	}
	q := k
	var ps []catalog.Product
	for _, r := range m.rows {
		p := r.Product
		if p.Status == catalog.StatusActive && (q.Category == "" || p.Category == q.Category) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b catalog.Product) int {
		switch q.Sort {
		case catalog.SortPrice:
			return cmp.Or(cmp.Compare(a.PriceCents, b.PriceCents), cmp.Compare(a.ID, b.ID))
		case catalog.SortPriceDesc:
			return cmp.Or(cmp.Compare(b.PriceCents, a.PriceCents), cmp.Compare(b.ID, a.ID))
		case catalog.SortUpdated:
			return cmp.Or(b.UpdatedAt.Compare(a.UpdatedAt), cmp.Compare(b.ID, a.ID))
		default:
			return cmp.Or(strings.Compare(m.keys[a.ID], m.keys[b.ID]), cmp.Compare(a.ID, b.ID))
		}
	})
	m.sorted[k] = ps
	return ps
}

// search returns what Search(raw, limit) must return.
func (m *model) search(raw string, limit int) []catalog.Product {
	p, err := catalog.NormalizePrefix(raw)
	if err != nil || p == "" {
		return nil
	}
	limit = catalog.SearchLimit(limit)
	var byName, byCode []catalog.Product
	for _, r := range m.rows {
		pr := r.Product
		if pr.Status != catalog.StatusActive {
			continue
		}
		switch {
		case strings.HasPrefix(m.keys[pr.ID], p):
			byName = append(byName, pr)
		case strings.HasPrefix(catalog.SearchKey(pr.Code), p):
			byCode = append(byCode, pr)
		}
	}
	slices.SortFunc(byName, func(a, b catalog.Product) int {
		return cmp.Or(strings.Compare(m.keys[a.ID], m.keys[b.ID]), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(byCode, func(a, b catalog.Product) int {
		return cmp.Or(strings.Compare(catalog.SearchKey(a.Code), catalog.SearchKey(b.Code)), cmp.Compare(a.ID, b.ID))
	})
	out := append(byName, byCode...)
	return out[:min(limit, len(out))]
}

// find returns the first product for which ok is true.
func (m *model) find(ok func(catalog.SeedRow) bool) catalog.SeedRow {
	for _, r := range m.rows {
		if ok(r) {
			return r
		}
	}
	panic("catalogtest: the generated catalog has no such product")
}
