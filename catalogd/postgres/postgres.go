// Package postgres is catalogd's production catalog.Store: PostgreSQL
// through a pgx connection pool, with the same schema migrations and the same
// generated 10,000-product seed on first start as the embedded SQLite store.
//
// The driver is github.com/jackc/pgx/v5 with its pgxpool: the maintained
// pure-Go PostgreSQL driver, whose native interface gives COPY for the seed,
// a statement cache, and pool statistics for /metrics without going through
// database/sql.
//
// Prices, stock and versions are bigint; times are timestamptz, which keeps
// microseconds, so the store truncates every time it writes to microseconds
// and returns UTC, as the SQLite store does.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// Options configures Open. The zero value means the defaults.
type Options struct {
	// Now is the clock for UpdatedAt on writes. Default time.Now.
	Now func() time.Time

	// MaxConns caps the pool. Default: pool_max_conns from the DSN if
	// given, else pgxpool's max(4, number of CPUs). Every catalogd
	// instance holds up to this many server connections, so the sum over
	// instances must stay under the server's max_connections.
	MaxConns int32
}

// DB is a catalog.Store on a PostgreSQL database.
type DB struct {
	pool      *pgxpool.Pool
	now       func() time.Time
	closeOnce sync.Once
}

var (
	_ catalog.Store        = (*DB)(nil)
	_ catalog.PoolReporter = (*DB)(nil)
)

// Open connects to the database at dsn (a URL or key=value string, as
// libpq takes), applies the migrations it has not had and, on the first
// start only, seeds the generated catalog. ctx bounds the connection and
// the migrations: pass one with a deadline, or Open waits as long as an
// unreachable server keeps it waiting. opts may be nil.
func Open(ctx context.Context, dsn string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxConns < 0 {
		return nil, fmt.Errorf("postgres open: negative MaxConns %d", o.MaxConns)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error can quote the DSN, password included: say
		// only that it failed.
		return nil, errors.New("postgres open: cannot parse the DSN")
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres open: %w", err)
	}
	if err := migrate(ctx, pool, o.Now); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres open: %w", err)
	}
	return &DB{pool: pool, now: o.Now}, nil
}

// Ping reports whether the server answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for connections in use to be returned. It
// is safe to call more than once.
func (db *DB) Close() error {
	db.closeOnce.Do(db.pool.Close)
	return nil
}

// Stat returns pgxpool's statistics.
func (db *DB) Stat() *pgxpool.Stat { return db.pool.Stat() }

// PoolStats returns the pool's statistics for /metrics.
func (db *DB) PoolStats() []catalog.PoolStats {
	s := db.pool.Stat()
	return []catalog.PoolStats{{
		Name:         "pgx",
		MaxOpen:      int(s.MaxConns()),
		Open:         int(s.TotalConns()),
		InUse:        int(s.AcquiredConns()),
		Idle:         int(s.IdleConns()),
		WaitCount:    s.EmptyAcquireCount(),
		WaitDuration: s.EmptyAcquireWaitTime(),
	}}
}

// stamp is the form in which a time is written: UTC, microseconds, what
// timestamptz keeps, so the value returned is the value stored.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
