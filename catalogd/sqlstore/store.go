package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// The queries, written once with $n placeholders (Dialect.bind rewrites
// them) in SQL both databases run the same way.
const productCols = "id, code, name, category, price_cents, status, version, updated_at"

// The list queries, one per order and filter. They are assembled here, once,
// from constant fragments picked by the whitelisted catalog.Sort; request
// values only ever reach the database as bound parameters. status =
// 'active' is a literal so that the partial indexes apply.
var (
	orderBy = map[catalog.Sort]string{
		catalog.SortName:      "name_key, id",
		catalog.SortPrice:     "price_cents, id",
		catalog.SortPriceDesc: "price_cents DESC, id DESC",
		catalog.SortUpdated:   "updated_at DESC, id DESC",
	}
	listSQL    = map[bool]map[catalog.Sort]string{false: {}, true: {}} // [by category][sort]
	countAll   = "SELECT count(*) FROM products WHERE status = 'active'"
	countByCat = "SELECT count(*) FROM products WHERE status = 'active' AND category = $1"
)

func init() {
	// Each page query carries the total as an uncorrelated scalar
	// subquery, which both databases evaluate once: one statement, so the
	// page and the total come from one snapshot without a transaction.
	const all = "FROM products WHERE status = 'active'"
	const byCat = all + " AND category = $1"
	for s, o := range orderBy {
		listSQL[false][s] = "SELECT (SELECT count(*) " + all + "), " + productCols + " " + all + " ORDER BY " + o + " LIMIT $1 OFFSET $2"
		listSQL[true][s] = "SELECT (SELECT count(*) " + byCat + "), " + productCols + " " + byCat + " ORDER BY " + o + " LIMIT $2 OFFSET $3"
	}
}

// The search query: at most $3 name matches in name order, then at most $3
// code matches that are not name matches, in code order. Each half is a
// range scan on its partial index that stops after $3 rows (a subquery in
// FROM, because SQLite does not take a parenthesised SELECT as a member of
// a UNION). $1 and $2 are the bounds from catalog.PrefixRange; searchOpenSQL
// is the form for a prefix with no upper bound, with the limit in $2.
const (
	searchSQL = `SELECT 0 AS rank, k, ` + productCols + ` FROM (
		SELECT name_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND name_key >= $1 AND name_key < $2
		ORDER BY name_key, id LIMIT $3) AS by_name
	UNION ALL
	SELECT 1 AS rank, k, ` + productCols + ` FROM (
		SELECT code_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND code_key >= $1 AND code_key < $2
			AND NOT (name_key >= $1 AND name_key < $2)
		ORDER BY code_key, id LIMIT $3) AS by_code
	ORDER BY rank, k, id`
	searchOpenSQL = `SELECT 0 AS rank, k, ` + productCols + ` FROM (
		SELECT name_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND name_key >= $1
		ORDER BY name_key, id LIMIT $2) AS by_name
	UNION ALL
	SELECT 1 AS rank, k, ` + productCols + ` FROM (
		SELECT code_key AS k, ` + productCols + ` FROM products
		WHERE status = 'active' AND code_key >= $1 AND NOT (name_key >= $1)
		ORDER BY code_key, id LIMIT $2) AS by_code
	ORDER BY rank, k, id`
)

const (
	productSQL = "SELECT " + productCols + " FROM products WHERE id = $1"
	stockSQL   = "SELECT available, version, updated_at FROM stock WHERE product_id = $1"
	versionSQL = "SELECT version FROM products WHERE id = $1"

	// updateSQL carries the version check in its WHERE clause, so the
	// check and the write are atomic.
	updateSQL = `UPDATE products
		SET name = $1, name_key = $2, category = $3, price_cents = $4, status = $5, version = version + 1, updated_at = $6
		WHERE id = $7 AND version = $8
		RETURNING ` + productCols
	reserveSQL = "UPDATE stock SET available = $1, version = version + 1, updated_at = $2 WHERE product_id = $3 AND version = $4"
)

// readQueries are prepared on the read pool, writeQueries on the write pool.
func readQueries() []string {
	q := []string{productSQL, stockSQL, versionSQL, searchSQL, searchOpenSQL, countAll, countByCat}
	for _, bycat := range listSQL {
		for _, s := range bycat {
			q = append(q, s)
		}
	}
	return q
}

var writeQueries = []string{updateSQL, reserveSQL}

type scanner interface{ Scan(dest ...any) error }

func scanProduct(row scanner, extra ...any) (catalog.Product, error) {
	var p catalog.Product
	var status string
	dest := append(extra, &p.ID, &p.Code, &p.Name, &p.Category, &p.PriceCents, &status, &p.Version, timeDest{&p.UpdatedAt})
	if err := row.Scan(dest...); err != nil {
		return catalog.Product{}, err
	}
	p.Status = catalog.Status(status)
	return p, nil
}

// Product implements catalog.Store.
func (db *DB) Product(ctx context.Context, id int64) (catalog.Product, error) {
	p, err := scanProduct(db.stmts[productSQL].QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("%s product %d: %w", db.d.name, id, catalog.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("%s product %d: %w", db.d.name, id, err)
	}
	return p, nil
}

// Stock implements catalog.Store.
func (db *DB) Stock(ctx context.Context, id int64) (catalog.Stock, error) {
	s := catalog.Stock{ProductID: id}
	err := db.stmts[stockSQL].QueryRowContext(ctx, id).Scan(&s.Available, &s.Version, timeDest{&s.UpdatedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return catalog.Stock{ProductID: id}, fmt.Errorf("%s stock %d: %w", db.d.name, id, catalog.ErrNotFound)
	}
	if err != nil {
		return catalog.Stock{ProductID: id}, fmt.Errorf("%s stock %d: %w", db.d.name, id, err)
	}
	return s, nil
}

// Products implements catalog.Store. A page past the end has no row to
// carry the total, so only then is the total counted on its own.
func (db *DB) Products(ctx context.Context, q catalog.ListQuery) (catalog.Page, error) {
	q, err := q.Normalize()
	if err != nil {
		return catalog.Page{}, fmt.Errorf("%s products: %w", db.d.name, err)
	}
	page := catalog.Page{Items: []catalog.Product{}, Page: q.Page, Size: q.Size}
	release, err := db.scan(ctx)
	if err != nil {
		return page, fmt.Errorf("%s products: %w", db.d.name, err)
	}
	defer release()
	var rows *sql.Rows
	if q.Category == "" {
		rows, err = db.stmts[listSQL[false][q.Sort]].QueryContext(ctx, q.Size, q.Offset())
	} else {
		rows, err = db.stmts[listSQL[true][q.Sort]].QueryContext(ctx, q.Category, q.Size, q.Offset())
	}
	if err != nil {
		return page, fmt.Errorf("%s products: %w", db.d.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		p, err := scanProduct(rows, &page.Total)
		if err != nil {
			return page, fmt.Errorf("%s products: %w", db.d.name, err)
		}
		page.Items = append(page.Items, p)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("%s products: %w", db.d.name, err)
	}
	if len(page.Items) == 0 {
		if q.Category == "" {
			err = db.stmts[countAll].QueryRowContext(ctx).Scan(&page.Total)
		} else {
			err = db.stmts[countByCat].QueryRowContext(ctx, q.Category).Scan(&page.Total)
		}
		if err != nil {
			return page, fmt.Errorf("%s products: %w", db.d.name, err)
		}
	}
	return page, nil
}

// Search implements catalog.Store.
func (db *DB) Search(ctx context.Context, prefix string, limit int) ([]catalog.Product, error) {
	p, err := catalog.NormalizePrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("%s search: %w", db.d.name, err)
	}
	out := []catalog.Product{}
	if p == "" {
		return out, nil
	}
	limit = catalog.SearchLimit(limit)
	release, err := db.scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s search %q: %w", db.d.name, p, err)
	}
	defer release()
	lo, hi, bounded := catalog.PrefixRange(p)
	var rows *sql.Rows
	if bounded {
		rows, err = db.stmts[searchSQL].QueryContext(ctx, lo, hi, limit)
	} else {
		rows, err = db.stmts[searchOpenSQL].QueryContext(ctx, lo, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%s search %q: %w", db.d.name, p, err)
	}
	defer rows.Close()
	for rows.Next() {
		var rank int
		var key string
		pr, err := scanProduct(rows, &rank, &key)
		if err != nil {
			return nil, fmt.Errorf("%s search %q: %w", db.d.name, p, err)
		}
		if len(out) < limit {
			out = append(out, pr)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s search %q: %w", db.d.name, p, err)
	}
	return out, nil
}

// UpdateProduct implements catalog.Store: one UPDATE whose WHERE clause
// carries the version check, so the check and the write are atomic.
func (db *DB) UpdateProduct(ctx context.Context, id, expectedVersion int64, u catalog.ProductUpdate) (catalog.Product, error) {
	if err := u.Validate(); err != nil {
		return catalog.Product{}, fmt.Errorf("%s update product %d: %w", db.d.name, id, err)
	}
	p, err := scanProduct(db.stmts[updateSQL].QueryRowContext(ctx,
		u.Name, catalog.SearchKey(u.Name), u.Category, u.PriceCents, string(u.Status), db.d.timeArg(db.now()), id, expectedVersion))
	if err == nil {
		return p, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return p, fmt.Errorf("%s update product %d: %w", db.d.name, id, err)
	}
	// No row changed: either there is no such product or its version moved.
	var v int64
	err = db.stmts[versionSQL].QueryRowContext(ctx, id).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, fmt.Errorf("%s update product %d: %w", db.d.name, id, catalog.ErrNotFound)
	case err != nil:
		return p, fmt.Errorf("%s update product %d: %w", db.d.name, id, err)
	}
	return p, fmt.Errorf("%s update product %d: version is %d, not %d: %w", db.d.name, id, v, expectedVersion, catalog.ErrConflict)
}

// Reserve implements catalog.Store with optimistic locking: read the stock
// row, then write it back only if its version is still the one read. No row
// lock is held between the two, so a slow client never blocks others; a
// lost race retries after a short random pause (so the losers do not
// collide again in lockstep), at most catalog.MaxReserveAttempts times.
func (db *DB) Reserve(ctx context.Context, id, qty int64) (catalog.Stock, error) {
	if qty < 1 {
		return catalog.Stock{}, fmt.Errorf("%s reserve %d: %w: quantity %d < 1", db.d.name, id, catalog.ErrInvalid, qty)
	}
	for attempt := 1; ; attempt++ {
		s, err := db.Stock(ctx, id)
		if err != nil {
			return catalog.Stock{}, fmt.Errorf("%s reserve: %w", db.d.name, err)
		}
		if s.Available < qty {
			return s, fmt.Errorf("%s reserve %d: %d available, %d asked: %w", db.d.name, id, s.Available, qty, catalog.ErrInsufficientStock)
		}
		now := stamp(db.now())
		res, err := db.stmts[reserveSQL].ExecContext(ctx, s.Available-qty, db.d.timeArg(now), id, s.Version)
		if err != nil {
			return catalog.Stock{}, fmt.Errorf("%s reserve %d: %w", db.d.name, id, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return catalog.Stock{}, fmt.Errorf("%s reserve %d: %w", db.d.name, id, err)
		} else if n == 1 {
			return catalog.Stock{ProductID: id, Available: s.Available - qty, Version: s.Version + 1, UpdatedAt: now}, nil
		}
		if attempt == catalog.MaxReserveAttempts {
			return catalog.Stock{}, fmt.Errorf("%s reserve %d: lost the race %d times: %w", db.d.name, id, attempt, catalog.ErrConflict)
		}
		if err := pause(ctx, attempt); err != nil {
			return catalog.Stock{}, fmt.Errorf("%s reserve %d: %w", db.d.name, id, err)
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
