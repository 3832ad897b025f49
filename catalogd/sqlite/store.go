package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

const productCols = "id, code, name, category, price_cents, status, version, updated_at"

// The list queries, one per order and filter. They are assembled here, once,
// from constant fragments picked by the whitelisted catalog.Sort; request
// values only ever reach SQLite as bound parameters. status = 'active' is a
// literal so that the partial indexes apply.
var (
	orderBy = map[catalog.Sort]string{
		catalog.SortName:      "name_key, id",
		catalog.SortPrice:     "price_cents, id",
		catalog.SortPriceDesc: "price_cents DESC, id DESC",
		catalog.SortUpdated:   "updated_at DESC, id DESC",
	}
	listSQL    = map[bool]map[catalog.Sort]string{false: {}, true: {}} // [by category][sort]
	countAll   = "SELECT count(*) FROM products WHERE status = 'active'"
	countByCat = "SELECT count(*) FROM products WHERE status = 'active' AND category = ?1"
)

func init() {
	// Each page query carries the total as a scalar subquery, which SQLite
	// evaluates once: one statement, so the page and the total come from
	// one snapshot without a transaction.
	const all = "FROM products WHERE status = 'active'"
	const byCat = all + " AND category = ?1"
	for s, o := range orderBy {
		listSQL[false][s] = "SELECT (SELECT count(*) " + all + "), " + productCols + " " + all + " ORDER BY " + o + " LIMIT ?1 OFFSET ?2"
		listSQL[true][s] = "SELECT (SELECT count(*) " + byCat + "), " + productCols + " " + byCat + " ORDER BY " + o + " LIMIT ?2 OFFSET ?3"
	}
}

// The search query: at most ?3 name matches in name order, then at most ?3
// code matches that are not name matches, in code order. Each half is a
// range scan on its partial index that stops after ?3 rows. ?1 and ?2 are the
// bounds from catalog.PrefixRange; searchOpenSQL is the form for a prefix
// with no upper bound, which leaves ?2 unused (it is bound to NULL).
const (
	searchSQL = `SELECT 0 AS rank, k, ` + productCols + ` FROM (
		SELECT name_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND name_key >= ?1 AND name_key < ?2
		ORDER BY name_key, id LIMIT ?3)
	UNION ALL
	SELECT 1 AS rank, k, ` + productCols + ` FROM (
		SELECT code_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND code_key >= ?1 AND code_key < ?2
			AND NOT (name_key >= ?1 AND name_key < ?2)
		ORDER BY code_key, id LIMIT ?3)
	ORDER BY rank, k, id`
	searchOpenSQL = `SELECT 0 AS rank, k, ` + productCols + ` FROM (
		SELECT name_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND name_key >= ?1
		ORDER BY name_key, id LIMIT ?3)
	UNION ALL
	SELECT 1 AS rank, k, ` + productCols + ` FROM (
		SELECT code_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND code_key >= ?1 AND NOT (name_key >= ?1)
		ORDER BY code_key, id LIMIT ?3)
	ORDER BY rank, k, id`
)

const (
	productSQL = "SELECT " + productCols + " FROM products WHERE id = ?"
	stockSQL   = "SELECT available, version, updated_at FROM stock WHERE product_id = ?"
)

// readQueries are the statements prepared on the read pool at Open. The
// translated SQLite parses SQL slowly enough that parsing showed as two
// thirds of a search's time; database/sql then keeps each statement prepared
// on every connection that has run it.
func readQueries() []string {
	q := []string{productSQL, stockSQL, searchSQL, searchOpenSQL, countAll, countByCat}
	for _, bycat := range listSQL {
		for _, s := range bycat {
			q = append(q, s)
		}
	}
	return q
}

type scanner interface{ Scan(dest ...any) error }

func scanProduct(row scanner, extra ...any) (catalog.Product, error) {
	var p catalog.Product
	var status string
	var updated int64
	dest := append(extra, &p.ID, &p.Code, &p.Name, &p.Category, &p.PriceCents, &status, &p.Version, &updated)
	if err := row.Scan(dest...); err != nil {
		return p, err
	}
	p.Status = catalog.Status(status)
	p.UpdatedAt = fromMicros(updated)
	return p, nil
}

// Product implements catalog.Store.
func (db *DB) Product(ctx context.Context, id int64) (catalog.Product, error) {
	p, err := scanProduct(db.stmts[productSQL].QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("sqlite product %d: %w", id, catalog.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("sqlite product %d: %w", id, err)
	}
	return p, nil
}

// Stock implements catalog.Store.
func (db *DB) Stock(ctx context.Context, id int64) (catalog.Stock, error) {
	s := catalog.Stock{ProductID: id}
	var updated int64
	err := db.stmts[stockSQL].QueryRowContext(ctx, id).Scan(&s.Available, &s.Version, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("sqlite stock %d: %w", id, catalog.ErrNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("sqlite stock %d: %w", id, err)
	}
	s.UpdatedAt = fromMicros(updated)
	return s, nil
}

// Products implements catalog.Store. A page past the end has no row to
// carry the total, so only then is the total counted on its own.
func (db *DB) Products(ctx context.Context, q catalog.ListQuery) (catalog.Page, error) {
	q, err := q.Normalize()
	if err != nil {
		return catalog.Page{}, fmt.Errorf("sqlite products: %w", err)
	}
	page := catalog.Page{Items: []catalog.Product{}, Page: q.Page, Size: q.Size}
	var rows *sql.Rows
	if q.Category == "" {
		rows, err = db.stmts[listSQL[false][q.Sort]].QueryContext(ctx, q.Size, q.Offset())
	} else {
		rows, err = db.stmts[listSQL[true][q.Sort]].QueryContext(ctx, q.Category, q.Size, q.Offset())
	}
	if err != nil {
		return page, fmt.Errorf("sqlite products: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanProduct(rows, &page.Total)
		if err != nil {
			return page, fmt.Errorf("sqlite products: %w", err)
		}
		page.Items = append(page.Items, p)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("sqlite products: %w", err)
	}
	if len(page.Items) == 0 {
		if q.Category == "" {
			err = db.stmts[countAll].QueryRowContext(ctx).Scan(&page.Total)
		} else {
			err = db.stmts[countByCat].QueryRowContext(ctx, q.Category).Scan(&page.Total)
		}
		if err != nil {
			return page, fmt.Errorf("sqlite products: %w", err)
		}
	}
	return page, nil
}

// Search implements catalog.Store.
func (db *DB) Search(ctx context.Context, prefix string, limit int) ([]catalog.Product, error) {
	p, err := catalog.NormalizePrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("sqlite search: %w", err)
	}
	out := []catalog.Product{}
	if p == "" {
		return out, nil
	}
	limit = catalog.SearchLimit(limit)
	lo, hi, bounded := catalog.PrefixRange(p)
	var rows *sql.Rows
	if bounded {
		rows, err = db.stmts[searchSQL].QueryContext(ctx, lo, hi, limit)
	} else {
		rows, err = db.stmts[searchOpenSQL].QueryContext(ctx, lo, nil, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite search %q: %w", p, err)
	}
	defer rows.Close()
	for rows.Next() {
		var rank int
		var key string
		pr, err := scanProduct(rows, &rank, &key)
		if err != nil {
			return nil, fmt.Errorf("sqlite search %q: %w", p, err)
		}
		if len(out) < limit {
			out = append(out, pr)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite search %q: %w", p, err)
	}
	return out, nil
}

// UpdateProduct implements catalog.Store: one UPDATE whose WHERE clause
// carries the version check, so the check and the write are atomic.
func (db *DB) UpdateProduct(ctx context.Context, id, expectedVersion int64, u catalog.ProductUpdate) (catalog.Product, error) {
	if err := u.Validate(); err != nil {
		return catalog.Product{}, fmt.Errorf("sqlite update product %d: %w", id, err)
	}
	now := db.now()
	p, err := scanProduct(db.write.QueryRowContext(ctx, `UPDATE products
		SET name = ?, name_key = ?, category = ?, price_cents = ?, status = ?, version = version + 1, updated_at = ?
		WHERE id = ? AND version = ?
		RETURNING `+productCols,
		u.Name, catalog.SearchKey(u.Name), u.Category, u.PriceCents, string(u.Status), micros(now), id, expectedVersion))
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("sqlite update product %d: %w", id, err)
	}
	// No row changed: either there is no such product or its version moved.
	var v int64
	err = db.read.QueryRowContext(ctx, "SELECT version FROM products WHERE id = ?", id).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, fmt.Errorf("sqlite update product %d: %w", id, catalog.ErrNotFound)
	case err != nil:
		return p, fmt.Errorf("sqlite update product %d: %w", id, err)
	}
	return p, fmt.Errorf("sqlite update product %d: version is %d, not %d: %w", id, v, expectedVersion, catalog.ErrConflict)
}

// Reserve implements catalog.Store with optimistic locking: read the stock
// row, then write it back only if its version is still the one read. A lost
// race retries after a short random pause (so the losers do not collide
// again in lockstep), at most catalog.MaxReserveAttempts times.
func (db *DB) Reserve(ctx context.Context, id, qty int64) (catalog.Stock, error) {
	if qty < 1 {
		return catalog.Stock{}, fmt.Errorf("sqlite reserve %d: %w: quantity %d < 1", id, catalog.ErrInvalid, qty)
	}
	for attempt := 1; ; attempt++ {
		s, err := db.Stock(ctx, id)
		if err != nil {
			return catalog.Stock{}, fmt.Errorf("sqlite reserve: %w", err)
		}
		if s.Available < qty {
			return s, fmt.Errorf("sqlite reserve %d: %d available, %d asked: %w", id, s.Available, qty, catalog.ErrInsufficientStock)
		}
		now := db.now()
		res, err := db.write.ExecContext(ctx,
			"UPDATE stock SET available = ?, version = version + 1, updated_at = ? WHERE product_id = ? AND version = ?",
			s.Available-qty, micros(now), id, s.Version)
		if err != nil {
			return catalog.Stock{}, fmt.Errorf("sqlite reserve %d: %w", id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return catalog.Stock{}, fmt.Errorf("sqlite reserve %d: %w", id, err)
		} else if n == 1 {
			return catalog.Stock{ProductID: id, Available: s.Available - qty, Version: s.Version + 1, UpdatedAt: fromMicros(micros(now))}, nil
		}
		if attempt == catalog.MaxReserveAttempts {
			return catalog.Stock{}, fmt.Errorf("sqlite reserve %d: lost the race %d times: %w", id, attempt, catalog.ErrConflict)
		}
		if err := pause(ctx, attempt); err != nil {
			return catalog.Stock{}, fmt.Errorf("sqlite reserve %d: %w", id, err)
		}
	}
}

// pause waits a random time up to attempt × 1 ms, or until ctx is done.
func pause(ctx context.Context, attempt int) error {
	t := time.NewTimer(rand.N(time.Duration(attempt) * time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
