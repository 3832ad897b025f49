package sqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

//go:embed migrations/postgres_0001_schema.sql
var postgresSchema string

// migrationLock is the advisory lock key that serialises migrations, so
// that catalogd instances starting together against one database apply each
// step once. Any constant works; this is "holdfast" in ASCII, truncated.
const migrationLock int64 = 0x686f6c6466617374

// PostgreSQL is the production database: Open's source is a DSN, a URL or
// key=value string as libpq takes, with pgxpool's pool_* settings too. Open
// connects while it migrates, so its ctx bounds the connection: pass one
// with a deadline, or Open waits as long as an unreachable server keeps it
// waiting. Every catalogd instance holds up to MaxConns server connections,
// so the sum over instances must stay under the server's max_connections.
//
// The driver is github.com/jackc/pgx/v5 through its database/sql adapter.
// Prices, stock and versions are bigint; times are timestamptz.
var PostgreSQL = &Dialect{
	name:           "postgres",
	open:           openPostgres,
	sourceInErrors: false,
	poolNames:      []string{"pgx"},
	placeholder:    "$",
	timeAsMicros:   false,
	migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL
	)`,
	lockMigrations: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", migrationLock),
	schema:         postgresSchema,
	// One round trip per 1,000 rows; 10,000 bind parameters stay under
	// the protocol's 65,535.
	seedBatch: 1000,
	// The planner then knows the tables' size at once rather than after
	// autovacuum gets to them.
	afterSeed: "ANALYZE products, stock",
	// The advisory lock serialises the migrations: nothing to retry.
	busy: nil,
}

func openPostgres(_ context.Context, dsn string, o Options) (read, write *sql.DB, err error) {
	// pgxpool's parser, for its pool_* settings, which plain pgx would
	// send to the server as unknown parameters.
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error can quote the DSN, password included: say
		// only that it failed.
		return nil, nil, errors.New("cannot parse the DSN")
	}
	n := int(cfg.MaxConns) // pool_max_conns, else max(4, number of CPUs)
	if o.MaxConns > 0 {
		n = o.MaxConns
	}
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n) // keep them, with their prepared statements
	db.SetConnMaxLifetime(cfg.MaxConnLifetime)
	db.SetConnMaxIdleTime(cfg.MaxConnIdleTime)
	return db, db, nil
}
