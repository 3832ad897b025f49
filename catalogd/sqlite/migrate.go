package sqlite

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

//go:embed migrations/0001_schema.sql
var schemaV1 string

// A migration is one versioned step: SQL text or, for the seed, Go code.
// Versions only ever grow; a released step is never edited, only followed.
type migration struct {
	version int
	name    string
	sql     string
	fn      func(ctx context.Context, tx *sql.Tx) error
}

var migrations = []migration{
	{version: 1, name: "schema", sql: schemaV1},
	// The seed is a migration so that it runs exactly once, on the first
	// start, in the same transaction as the schema: a crash during the
	// first start leaves an empty file, never a half-seeded catalog.
	{version: 2, name: "seed generated catalog", fn: seed},
}

// migrate applies the migrations the file has not had, all in one
// transaction. BEGIN IMMEDIATE (the write pool's _txlock) takes the write
// lock before reading schema_migrations, so two processes starting on the
// same file apply each step once: the second waits, then finds nothing to
// do.
func migrate(ctx context.Context, db *sql.DB, now func() time.Time) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
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
			err = m.fn(ctx, tx)
		} else {
			_, err = tx.ExecContext(ctx, m.sql)
		}
		if err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, micros(now())); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// seedBatch is how many rows one INSERT carries. Each statement execution
// crosses from Go into the translated SQLite and back, which costs more than
// SQLite's own work for a row; 100 rows of 10 columns stay far below
// SQLite's 32,766 bound parameters.
const seedBatch = 100

// seed inserts the generated catalog in the migration's transaction (one
// commit, so one sync, for 20,000 rows) with two prepared multi-row INSERTs.
func seed(ctx context.Context, tx *sql.Tx) error {
	rows := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	products := batchInsert("products", "id, code, code_key, name, name_key, category, price_cents, status, version, updated_at", 10)
	stock := batchInsert("stock", "product_id, available, version, updated_at", 4)
	var pargs, sargs []any
	for i, r := range rows {
		p, st := r.Product, r.Stock
		pargs = append(pargs, p.ID, p.Code, catalog.SearchKey(p.Code), p.Name, catalog.SearchKey(p.Name),
			p.Category, p.PriceCents, string(p.Status), p.Version, micros(p.UpdatedAt))
		sargs = append(sargs, st.ProductID, st.Available, st.Version, micros(st.UpdatedAt))
		if (i+1)%seedBatch != 0 && i != len(rows)-1 {
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
	return errors.Join(products.close(), stock.close())
}

// batcher runs "INSERT INTO table (cols) VALUES (?, ...), (?, ...)" with as
// many rows as it is given, preparing the full-batch statement once.
type batcher struct {
	table, cols string
	ncols       int
	full        *sql.Stmt
}

func batchInsert(table, cols string, ncols int) *batcher {
	return &batcher{table: table, cols: cols, ncols: ncols}
}

func (b *batcher) sql(rows int) string {
	row := "(?" + strings.Repeat(", ?", b.ncols-1) + ")"
	return "INSERT INTO " + b.table + " (" + b.cols + ") VALUES " + row + strings.Repeat(", "+row, rows-1)
}

func (b *batcher) exec(ctx context.Context, tx *sql.Tx, args []any) error {
	rows := len(args) / b.ncols
	if rows != seedBatch {
		_, err := tx.ExecContext(ctx, b.sql(rows), args...)
		return err
	}
	if b.full == nil {
		st, err := tx.PrepareContext(ctx, b.sql(seedBatch))
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
