package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// A migration is one versioned step: SQL text or, for the seed, Go code.
// Versions only ever grow; a released step is never edited, only followed.
type migration struct {
	version int
	name    string
	sql     func(d *Dialect) string
	fn      func(ctx context.Context, d *Dialect, tx *sql.Tx) error
}

var migrations = []migration{
	{version: 1, name: "schema", sql: func(d *Dialect) string { return d.schema }},
	// The seed is a migration so that it runs exactly once, on the first
	// start, in the same transaction as the schema: a failed first start
	// leaves an empty database, never a half-seeded catalog.
	{version: 2, name: "seed generated catalog", fn: seed},
}

// migrateRetrying runs migrate again while it fails with an error the
// dialect calls busy, for up to o.BusyTimeout. migrate is one transaction
// that checks what is applied, so a retry is safe.
func migrateRetrying(ctx context.Context, d *Dialect, db *sql.DB, o Options) error {
	deadline := time.Now().Add(o.BusyTimeout)
	wait := 5 * time.Millisecond
	for {
		err := migrate(ctx, d, db, o.Now)
		if err == nil || d.busy == nil || !d.busy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// migrate applies the migrations the database has not had, all in one
// transaction that first takes the dialect's migration lock, so that two
// processes starting on one database apply each step once: the second
// waits, then finds nothing to do.
func migrate(ctx context.Context, d *Dialect, db *sql.DB, now func() time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if d.lockMigrations != "" {
		if _, err := tx.ExecContext(ctx, d.lockMigrations); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, d.migrationsTable); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if m.fn != nil {
			err = m.fn(ctx, d, tx)
		} else {
			// No arguments: pgx then uses the simple protocol, which
			// runs several statements, as SQLite's Exec does.
			_, err = tx.ExecContext(ctx, m.sql(d))
		}
		if err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, d.bind("INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)"),
			m.version, m.name, d.timeArg(now())); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// seed inserts the generated catalog in the migration's transaction (one
// commit for 20,000 rows) with multi-row INSERTs of d.seedBatch rows, the
// full-batch statement prepared once per table.
func seed(ctx context.Context, d *Dialect, tx *sql.Tx) error {
	rows := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	products := &batcher{d: d, table: "products", cols: "id, code, code_key, name, name_key, category, price_cents, status, version, updated_at", ncols: 10}
	stock := &batcher{d: d, table: "stock", cols: "product_id, available, version, updated_at", ncols: 4}
	var pargs, sargs []any
	for i, r := range rows {
		p, st := r.Product, r.Stock
		pargs = append(pargs, p.ID, p.Code, catalog.SearchKey(p.Code), p.Name, catalog.SearchKey(p.Name),
			p.Category, p.PriceCents, string(p.Status), p.Version, d.timeArg(p.UpdatedAt))
		sargs = append(sargs, st.ProductID, st.Available, st.Version, d.timeArg(st.UpdatedAt))
		if (i+1)%d.seedBatch != 0 && i != len(rows)-1 {
			continue
		}
		if err := products.exec(ctx, tx, pargs); err != nil {
			return fmt.Errorf("products up to %d: %w", p.ID, err)
		}
		if err := stock.exec(ctx, tx, sargs); err != nil {
			return fmt.Errorf("stock up to %d: %w", p.ID, err)
		}
		pargs, sargs = pargs[:0], sargs[:0]
	}
	if err := errors.Join(products.close(), stock.close()); err != nil {
		return err
	}
	if d.afterSeed != "" {
		if _, err := tx.ExecContext(ctx, d.afterSeed); err != nil {
			return fmt.Errorf("after seed: %w", err)
		}
	}
	return nil
}

// batcher runs "INSERT INTO table (cols) VALUES ($1, ...), ($n, ...)" with
// as many rows as it is given, preparing the full-batch statement once.
type batcher struct {
	d           *Dialect
	table, cols string
	ncols       int
	full        *sql.Stmt
}

func (b *batcher) sql(rows int) string {
	var s strings.Builder
	s.WriteString("INSERT INTO " + b.table + " (" + b.cols + ") VALUES ")
	for r := range rows {
		if r > 0 {
			s.WriteString(", ")
		}
		s.WriteByte('(')
		for c := range b.ncols {
			if c > 0 {
				s.WriteString(", ")
			}
			s.WriteString(b.d.param(r*b.ncols + c + 1))
		}
		s.WriteByte(')')
	}
	return s.String()
}

func (b *batcher) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	rows := len(args) / b.ncols
	if rows != b.d.seedBatch {
		_, err := tx.ExecContext(ctx, b.sql(rows), args...)
		return err
	}
	if b.full == nil {
		st, err := tx.PrepareContext(ctx, b.sql(rows))
		if err != nil {
			return err
		}
		b.full = st
	}
	_, err := b.full.ExecContext(ctx, args...)
	return err
}

func (b *batcher) close() error {
	if b.full == nil {
		return nil
	}
	return b.full.Close()
}
