package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// Options configures Open. The zero value means the defaults.
type Options struct {
	// Now is the clock for UpdatedAt on writes. Default time.Now.
	Now func() time.Time

	// MaxConns caps the connections. SQLite: the read pool (the writes
	// have one connection of their own); default max(4, GOMAXPROCS).
	// PostgreSQL: the pool; default pool_max_conns from the DSN, else
	// max(4, number of CPUs). Searches and list pages hold at most
	// MaxConns − PointConns of them at once (at least one).
	MaxConns int

	// BusyTimeout, SQLite only, is how long a statement waits for a lock
	// held by another process before failing with SQLITE_BUSY, and how
	// long Open retries its migrations while they do. Default 5 s.
	BusyTimeout time.Duration
}

// DB is a catalog.Store on an SQL database.
type DB struct {
	d *Dialect
	// scans holds a token for each search or list page querying: they
	// take at most cap(scans) read connections, so that primary-key reads
	// (a product page, its stock) always find one free, however many
	// searches a flood of unique prefixes has waiting.
	scans     chan struct{}
	read      *sql.DB              // every SELECT
	write     *sql.DB              // every write; read's pool if the dialect has one pool
	stmts     map[string]*sql.Stmt // every query, prepared, by its $-form text
	now       func() time.Time
	closeOnce sync.Once
	closeErr  error
}

var (
	_ catalog.Store        = (*DB)(nil)
	_ catalog.PoolReporter = (*DB)(nil)
)

// Open opens the catalog at source (see SQLite and PostgreSQL for what it
// is), applies the schema migrations it has not had yet and, on the first
// start only, seeds the generated catalog. opts may be nil.
func Open(ctx context.Context, d *Dialect, source string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.MaxConns < 0 || o.BusyTimeout < 0 {
		return nil, fmt.Errorf("%s open: negative MaxConns %d or BusyTimeout %v", d.name, o.MaxConns, o.BusyTimeout)
	}
	fail := func(err error) error {
		if d.sourceInErrors {
			return fmt.Errorf("%s open %s: %w", d.name, source, err)
		}
		return fmt.Errorf("%s open: %w", d.name, err)
	}
	read, write, err := d.open(ctx, source, o)
	if err != nil {
		return nil, fail(err)
	}
	db := &DB{d: d, read: read, write: write, now: o.Now, stmts: map[string]*sql.Stmt{},
		scans: make(chan struct{}, max(1, read.Stats().MaxOpenConnections-PointConns))}
	// The migrations run before any reader looks at the schema.
	if err := migrateRetrying(ctx, d, write, o); err != nil {
		db.Close()
		return nil, fail(err)
	}
	if err := read.PingContext(ctx); err != nil {
		db.Close()
		return nil, fail(err)
	}
	// Every query is prepared once here: the translated SQLite parses SQL
	// slowly enough that parsing showed as two thirds of a search's time,
	// and database/sql then keeps each statement prepared on every
	// connection that has run it.
	for _, q := range readQueries() {
		if err := db.prepare(ctx, read, q); err != nil {
			db.Close()
			return nil, fail(err)
		}
	}
	for _, q := range writeQueries {
		if err := db.prepare(ctx, write, q); err != nil {
			db.Close()
			return nil, fail(err)
		}
	}
	return db, nil
}

// PointConns is how many of the read connections only primary-key reads
// may use: a product page's miss is one indexed query of well under a
// millisecond, so two connections serve thousands a second.
const PointConns = 2

// scan takes a scan token, waiting for one while ctx allows; release gives
// it back.
func (db *DB) scan(ctx context.Context) (release func(), err error) {
	select {
	case db.scans <- struct{}{}:
		return db.releaseScan, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (db *DB) releaseScan() { <-db.scans }

func (db *DB) prepare(ctx context.Context, pool *sql.DB, query string) error {
	st, err := pool.PrepareContext(ctx, db.d.bind(query))
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	db.stmts[query] = st
	return nil
}

// Ping reports whether the database can still be read.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.read.PingContext(ctx); err != nil {
		return fmt.Errorf("%s ping: %w", db.d.name, err)
	}
	// A Ping on a database/sql pool may reuse an idle connection without
	// touching the file; a one-row query does touch it.
	var one int
	if err := db.read.QueryRowContext(ctx, "SELECT 1 FROM schema_migrations LIMIT 1").Scan(&one); err != nil {
		return fmt.Errorf("%s ping: %w", db.d.name, err)
	}
	return nil
}

// Close closes the statements and the pools, waiting for the queries under
// way. It is safe to call more than once.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		var errs []error
		for _, st := range db.stmts {
			errs = append(errs, st.Close())
		}
		errs = append(errs, db.read.Close())
		if db.write != db.read {
			errs = append(errs, db.write.Close())
		}
		db.closeErr = errors.Join(errs...)
	})
	return db.closeErr
}

// PoolStats returns the pools' statistics for /metrics: SQLite's read and
// write pool, PostgreSQL's one pool.
func (db *DB) PoolStats() []catalog.PoolStats {
	out := []catalog.PoolStats{poolStats(db.d.poolNames[0], db.read.Stats())}
	if db.write != db.read {
		out = append(out, poolStats(db.d.poolNames[1], db.write.Stats()))
	}
	return out
}

func poolStats(name string, s sql.DBStats) catalog.PoolStats {
	return catalog.PoolStats{
		Name:         name,
		MaxOpen:      s.MaxOpenConnections,
		Open:         s.OpenConnections,
		InUse:        s.InUse,
		Idle:         s.Idle,
		WaitCount:    s.WaitCount,
		WaitDuration: s.WaitDuration,
	}
}
