// Package catalog is the vocabulary of catalogd's product catalog: the
// product and stock records, the list and search queries, the Store interface
// both databases implement, and the errors they return.
//
// The read methods (Product, Stock, Products, Search) are what catalogd puts
// behind holdfast; the write methods (UpdateProduct, Reserve) go straight to
// the database. Reserve is the order path as a real product service runs it:
// it takes stock with optimistic locking on the stock row's version — read
// the row, write it back only if the version is unchanged, retry a bounded
// number of times — so the stock figure a cache shows is only a hint and the
// database alone decides whether an order gets its units.
//
// The package imports nothing outside the standard library, so the HTTP
// service, the stores and their tests can share it without pulling in a
// database driver. Generate builds the deterministic 10,000-product catalog
// the stores seed on first start, and catalog/catalogtest holds the one test
// suite every Store must pass.
package catalog

import (
	"context"
	"time"
)

// Status says whether a product is offered.
type Status string

// The statuses a product can have. Only active products appear in lists and
// search results; Product returns every status, so a detail page can still
// say that something was discontinued.
const (
	StatusActive       Status = "active"
	StatusHidden       Status = "hidden"
	StatusDiscontinued Status = "discontinued"
)

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusActive, StatusHidden, StatusDiscontinued:
		return true
	}
	return false
}

// Product is one catalog entry.
type Product struct {
	ID         int64     `json:"id"`
	Code       string    `json:"code"` // "P000123": unique, never changes
	Name       string    `json:"name"`
	Category   string    `json:"category"`
	PriceCents int64     `json:"price_cents"`
	Status     Status    `json:"status"`
	Version    int64     `json:"version"` // 1 when created, +1 on every update
	UpdatedAt  time.Time `json:"updated_at"`
}

// Stock is the number of units of a product that can still be reserved.
type Stock struct {
	ProductID int64     `json:"product_id"`
	Available int64     `json:"available"`
	Version   int64     `json:"version"` // +1 on every reservation
	UpdatedAt time.Time `json:"updated_at"`
}

// ProductUpdate holds the fields UpdateProduct replaces. All four are
// written; a caller that changes one field sends the others unchanged.
type ProductUpdate struct {
	Name       string `json:"name"`
	PriceCents int64  `json:"price_cents"`
	Status     Status `json:"status"`
	Category   string `json:"category"`
}

// Page is one page of a product list.
type Page struct {
	Items []Product `json:"items"`
	Total int64     `json:"total"` // active products matching the filter, over all pages
	Page  int       `json:"page"`  // the normalized page number, from 1
	Size  int       `json:"size"`  // the normalized page size
}

// Store is the product database. Implementations are safe for concurrent
// use; every method but Close takes the caller's context and returns when it
// is done. Errors are ErrNotFound, ErrInvalid, ErrConflict and
// ErrInsufficientStock as documented, or a wrapped database error.
type Store interface {
	// Product returns the product with the given id, whatever its status,
	// or ErrNotFound.
	Product(ctx context.Context, id int64) (Product, error)

	// Stock returns the stock of the product with the given id, or
	// ErrNotFound.
	Stock(ctx context.Context, id int64) (Stock, error)

	// Products returns one page of active products. The query is
	// normalized with ListQuery.Normalize; an invalid query returns
	// ErrInvalid. A page past the end has no items but the right Total.
	Products(ctx context.Context, q ListQuery) (Page, error)

	// Search returns active products whose name or code starts with
	// prefix, ignoring case (see SearchKey): name matches first, ordered
	// by SearchKey(name) then id, then the code matches that did not
	// match by name, ordered by SearchKey(code). At most limit products are returned
	// (clamped by SearchLimit). An empty prefix returns no products; one
	// over MaxPrefixLen runes returns ErrInvalid.
	Search(ctx context.Context, prefix string, limit int) ([]Product, error)

	// UpdateProduct replaces the product's name, price, status and
	// category if its version is still expectedVersion, and returns the
	// product as stored, with Version incremented and UpdatedAt set.
	// It returns ErrNotFound for an unknown id, ErrConflict when the
	// version has moved on, and ErrInvalid for a bad update.
	UpdateProduct(ctx context.Context, id, expectedVersion int64, u ProductUpdate) (Product, error)

	// Reserve takes qty units of the product's stock with optimistic
	// locking and returns the stock after the reservation. It returns
	// ErrInsufficientStock when fewer than qty units are available,
	// ErrNotFound for an unknown id, ErrInvalid for qty < 1, and
	// ErrConflict when it lost the race for the row MaxReserveAttempts
	// times in a row; nothing is reserved in any of those cases. With
	// ErrInsufficientStock it also returns the stock it read, so a caller
	// can say how many units are left.
	Reserve(ctx context.Context, id, qty int64) (Stock, error)

	// Ping reports whether the database can be reached.
	Ping(ctx context.Context) error

	// Close releases the database connections.
	Close() error
}

// MaxReserveAttempts bounds Reserve's optimistic-locking retries: after this
// many lost races it gives up with ErrConflict rather than spin under a hot
// product, and the order service can retry or tell the buyer.
const MaxReserveAttempts = 10

// PoolStats describes one connection pool, for the /metrics endpoint. The
// fields are what database/sql's DBStats and pgxpool's Stat both have.
type PoolStats struct {
	Name         string        // which pool: "read", "write", "pgx"
	MaxOpen      int           // the pool's connection limit
	Open         int           // connections open, in use or idle
	InUse        int           // connections lent out
	Idle         int           // connections waiting in the pool
	WaitCount    int64         // acquisitions that had to wait, ever
	WaitDuration time.Duration // time spent waiting for a connection, ever
}

// PoolReporter is implemented by stores that keep connection pools. It is
// separate from Store so that fakes in tests need not invent pools.
type PoolReporter interface {
	PoolStats() []PoolStats
}
