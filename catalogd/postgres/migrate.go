package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	fn      func(ctx context.Context, tx pgx.Tx) error
}

var migrations = []migration{
	{version: 1, name: "schema", sql: schemaV1},
	// The seed is a migration so that it runs exactly once, on the first
	// start, in the same transaction as the schema: a failed first start
	// leaves an empty database, never a half-seeded catalog.
	{version: 2, name: "seed generated catalog", fn: seed},
}

// migrationLock is the advisory lock key that serialises migrations, so
// that catalogd instances starting together against one database apply each
// step once. Any constant works; this is "holdfast" in ASCII, truncated.
const migrationLock int64 = 0x686f6c6466617374

// migrate applies the migrations the database has not had, all in one
// transaction, holding migrationLock.
func migrate(ctx context.Context, pool *pgxpool.Pool, now func() time.Time) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx) // an error after Commit, ignored
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if m.fn != nil {
			err = m.fn(ctx, tx)
		} else {
			_, err = tx.Exec(ctx, m.sql) // no arguments: the simple protocol, which runs several statements
		}
		if err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
			m.version, m.name, stamp(now())); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// seed loads the generated catalog with COPY, one round trip per table,
// then analyzes the tables so that the planner knows their size at once
// rather than after autovacuum gets to them.
func seed(ctx context.Context, tx pgx.Tx) error {
	rows := catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"products"},
		[]string{"id", "code", "code_key", "name", "name_key", "category", "price_cents", "status", "version", "updated_at"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			p := rows[i].Product
			return []any{p.ID, p.Code, catalog.SearchKey(p.Code), p.Name, catalog.SearchKey(p.Name),
				p.Category, p.PriceCents, string(p.Status), p.Version, stamp(p.UpdatedAt)}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy products: %w", err)
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"stock"},
		[]string{"product_id", "available", "version", "updated_at"},
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
			s := rows[i].Stock
			return []any{s.ProductID, s.Available, s.Version, stamp(s.UpdatedAt)}, nil
		}))
	if err != nil {
		return fmt.Errorf("copy stock: %w", err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE products, stock"); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}
