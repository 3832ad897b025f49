package httpapi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// fakeStore is a hand-written catalog.Store for the handler's logic: a few
// products in maps, counters of the reads that reached it, and switches
// that make reads fail or block so the cache's failure paths can be driven.
type fakeStore struct {
	mu       sync.Mutex
	products map[int64]catalog.Product
	stock    map[int64]catalog.Stock
	reads    map[string]int // "product", "stock", "list", "search"
	readErr  error          // returned by every read while non-nil
	pingErr  error
	// blockID, when non-zero, makes Product(blockID) signal entered and
	// wait for release, like a slow query holding a load slot.
	blockID int64
	entered chan struct{}
	release chan struct{}
	// searchRelease, when non-nil and open, makes every Search signal
	// searchEntered and wait for it to be closed, like a slow search
	// holding its request in flight.
	searchEntered chan struct{}
	searchRelease chan struct{}
	reserves      int
}

var _ catalog.Store = (*fakeStore)(nil)
var _ catalog.PoolReporter = (*fakeStore)(nil)

func newFakeStore() *fakeStore {
	s := &fakeStore{
		products: map[int64]catalog.Product{},
		stock:    map[int64]catalog.Stock{},
		reads:    map[string]int{},
	}
	names := []string{"Red Kettle", "Red Lamp", "Blue Kettle", "Green Mug", "Redwood Desk"}
	for i, n := range names {
		id := int64(i + 1)
		cat := "kitchen"
		if i%2 == 1 {
			cat = "home"
		}
		s.products[id] = catalog.Product{ID: id, Code: fmt.Sprintf("P%06d", id), Name: n, Category: cat,
			PriceCents: 1000 * id, Status: catalog.StatusActive, Version: 1, UpdatedAt: catalog.SeedEpoch}
		s.stock[id] = catalog.Stock{ProductID: id, Available: 10, Version: 1, UpdatedAt: catalog.SeedEpoch}
	}
	return s
}

func (s *fakeStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[op]
}

func (s *fakeStore) setReadErr(err error) {
	s.mu.Lock()
	s.readErr = err
	s.mu.Unlock()
}

// read counts a read and returns the injected error, if any.
func (s *fakeStore) read(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads[op]++
	return s.readErr
}

func (s *fakeStore) Product(ctx context.Context, id int64) (catalog.Product, error) {
	if err := s.read("product"); err != nil {
		return catalog.Product{}, err
	}
	s.mu.Lock()
	block := s.blockID != 0 && s.blockID == id
	s.mu.Unlock()
	if block {
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
			return catalog.Product{}, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.products[id]
	if !ok {
		return p, fmt.Errorf("fake product %d: %w", id, catalog.ErrNotFound)
	}
	return p, nil
}

func (s *fakeStore) Stock(ctx context.Context, id int64) (catalog.Stock, error) {
	if err := s.read("stock"); err != nil {
		return catalog.Stock{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stock[id]
	if !ok {
		return st, fmt.Errorf("fake stock %d: %w", id, catalog.ErrNotFound)
	}
	return st, nil
}

func (s *fakeStore) Products(ctx context.Context, q catalog.ListQuery) (catalog.Page, error) {
	if err := s.read("list"); err != nil {
		return catalog.Page{}, err
	}
	q, err := q.Normalize()
	if err != nil {
		return catalog.Page{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []catalog.Product
	for _, p := range s.products {
		if p.Status == catalog.StatusActive && (q.Category == "" || p.Category == q.Category) {
			all = append(all, p)
		}
	}
	slices.SortFunc(all, func(a, b catalog.Product) int { return int(a.ID - b.ID) })
	page := catalog.Page{Items: []catalog.Product{}, Total: int64(len(all)), Page: q.Page, Size: q.Size}
	if off := q.Offset(); off < len(all) {
		page.Items = append(page.Items, all[off:min(len(all), off+q.Size)]...)
	}
	return page, nil
}

func (s *fakeStore) Search(ctx context.Context, prefix string, limit int) ([]catalog.Product, error) {
	if err := s.read("search"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	entered, release := s.searchEntered, s.searchRelease
	s.mu.Unlock()
	if release != nil {
		select {
		case <-release: // released: searches no longer wait
		default:
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	p, err := catalog.NormalizePrefix(prefix)
	if err != nil {
		return nil, err
	}
	out := []catalog.Product{}
	if p == "" {
		return out, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := int64(1); id <= int64(len(s.products)); id++ {
		pr := s.products[id]
		if strings.HasPrefix(catalog.SearchKey(pr.Name), p) || strings.HasPrefix(catalog.SearchKey(pr.Code), p) {
			out = append(out, pr)
		}
	}
	return out[:min(len(out), catalog.SearchLimit(limit))], nil
}

func (s *fakeStore) UpdateProduct(ctx context.Context, id, expectedVersion int64, u catalog.ProductUpdate) (catalog.Product, error) {
	if err := u.Validate(); err != nil {
		return catalog.Product{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.products[id]
	switch {
	case !ok:
		return p, fmt.Errorf("fake update %d: %w", id, catalog.ErrNotFound)
	case p.Version != expectedVersion:
		return p, fmt.Errorf("fake update %d: %w", id, catalog.ErrConflict)
	}
	p.Name, p.PriceCents, p.Status, p.Category = u.Name, u.PriceCents, u.Status, u.Category
	p.Version++
	p.UpdatedAt = time.Now().UTC().Truncate(time.Microsecond)
	s.products[id] = p
	return p, nil
}

func (s *fakeStore) Reserve(ctx context.Context, id, qty int64) (catalog.Stock, error) {
	if qty < 1 {
		return catalog.Stock{}, catalog.ErrInvalid
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserves++
	st, ok := s.stock[id]
	switch {
	case !ok:
		return st, fmt.Errorf("fake reserve %d: %w", id, catalog.ErrNotFound)
	case st.Available < qty:
		return st, fmt.Errorf("fake reserve %d: %w", id, catalog.ErrInsufficientStock)
	}
	st.Available -= qty
	st.Version++
	s.stock[id] = st
	return st, nil
}

func (s *fakeStore) Ping(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pingErr
}

func (s *fakeStore) Close() error { return nil }

func (s *fakeStore) PoolStats() []catalog.PoolStats {
	return []catalog.PoolStats{{Name: "fake", MaxOpen: 4, Open: 2, InUse: 1, Idle: 1}}
}
