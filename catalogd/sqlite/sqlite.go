// Package sqlite is catalogd's embedded default catalog.Store: one SQLite
// file under the data directory, created, migrated and seeded with the
// generated 10,000-product catalog on first start.
//
// SQLite allows any number of readers but one writer at a time, so a DB
// keeps two connection pools on the same file. Reads go to a pool of several
// connections opened with query_only, which in WAL mode read a consistent
// snapshot without ever waiting for the writer. Writes go to a pool of
// exactly one connection: writers then queue in Go, in database/sql's pool,
// where a context deadline ends the wait, instead of each holding its own
// connection and polling SQLite's lock with the busy handler. The busy
// timeout is still set, for another process (a second catalogd, the sqlite3
// shell) holding the lock.
//
// The driver is modernc.org/sqlite, SQLite translated to Go: no cgo and no C
// toolchain, so `go run ./catalogd` works on a fresh machine with nothing
// but Go installed.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// Options configures Open. The zero value means the defaults.
type Options struct {
	// Now is the clock for UpdatedAt on writes. Default time.Now.
	Now func() time.Time

	// ReadConns is the read pool's size. Default max(4, GOMAXPROCS):
	// readers do not block each other in WAL mode, and more connections
	// than cores only add memory (each has its own page cache).
	ReadConns int

	// BusyTimeout is how long a statement waits for a lock held by
	// another process before failing with SQLITE_BUSY. Default 5 s.
	BusyTimeout time.Duration
}

// DB is a catalog.Store on one SQLite file.
type DB struct {
	read      *sql.DB              // query_only connections, for every SELECT
	write     *sql.DB              // one connection, for every write
	stmts     map[string]*sql.Stmt // readQueries, prepared on read, by SQL text
	now       func() time.Time
	closeOnce sync.Once
	closeErr  error
}

var (
	_ catalog.Store        = (*DB)(nil)
	_ catalog.PoolReporter = (*DB)(nil)
)

// FileName is the catalog file's name inside catalogd's data directory.
const FileName = "catalog.db"

// Open opens the catalog at path (for catalogd, filepath.Join(dataDir,
// FileName)), creating the file and its directory if need be, applies the
// schema migrations it has not had yet and, on the first start only, seeds
// the generated catalog, which takes about 0.2 s. opts may be nil.
func Open(ctx context.Context, path string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReadConns == 0 {
		o.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = 5 * time.Second
	}
	if o.ReadConns < 0 || o.BusyTimeout < 0 {
		return nil, fmt.Errorf("sqlite open: negative ReadConns %d or BusyTimeout %v", o.ReadConns, o.BusyTimeout)
	}
	if path == "" || strings.ContainsRune(path, '?') {
		// The driver splits its DSN at the first '?'.
		return nil, fmt.Errorf("sqlite open: path %q is empty or contains '?'", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite open: %w", err)
	}

	// The write pool opens first: its DSN turns WAL on, which is a
	// property of the file, and it runs the migrations before any reader
	// looks at the schema. _txlock=immediate makes BEGIN take the write
	// lock at once, so a transaction never fails halfway when it tries to
	// upgrade a read lock that another writer has overtaken.
	write, err := sql.Open("sqlite", dsn(path, o.BusyTimeout, "_txlock=immediate"))
	if err != nil {
		return nil, fmt.Errorf("sqlite open %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0) // a file has no server to rebalance to
	if err := migrateRetrying(ctx, write, o.Now, o.BusyTimeout); err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite open %s: %w", path, err)
	}

	read, err := sql.Open("sqlite", dsn(path, o.BusyTimeout, "_query_only=1"))
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("sqlite open %s: %w", path, err)
	}
	read.SetMaxOpenConns(o.ReadConns)
	read.SetMaxIdleConns(o.ReadConns) // keep them: opening one re-reads the schema
	read.SetConnMaxLifetime(0)
	if err := read.PingContext(ctx); err != nil {
		read.Close()
		write.Close()
		return nil, fmt.Errorf("sqlite open %s: %w", path, err)
	}
	db := &DB{read: read, write: write, now: o.Now, stmts: map[string]*sql.Stmt{}}
	for _, q := range readQueries() {
		st, err := read.PrepareContext(ctx, q)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sqlite open %s: prepare: %w", path, err)
		}
		db.stmts[q] = st
	}
	return db, nil
}

// migrateRetrying runs migrate again while it fails with SQLITE_BUSY, for
// up to busy. The busy timeout does not cover every lock a new file goes
// through: while another process switches the file to WAL or recovers its
// WAL index, SQLite answers SQLITE_BUSY at once rather than call the busy
// handler (seen here: two processes opening a new file together).
// migrate is one transaction that checks what is applied, so a retry is
// safe.
func migrateRetrying(ctx context.Context, db *sql.DB, now func() time.Time, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	wait := 5 * time.Millisecond
	for {
		err := migrate(ctx, db, now)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
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

// dsn builds the driver's data source name. synchronous=NORMAL is the usual
// WAL setting: a commit survives a crash of the process, and a power cut
// can only lose the last commits, never corrupt the file.
func dsn(path string, busy time.Duration, extra string) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busy.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "1")
	return path + "?" + q.Encode() + "&" + extra
}

// Ping reports whether the file can still be read.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.read.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite ping: %w", err)
	}
	// A Ping on a database/sql pool may reuse an idle connection without
	// touching the file; a one-row query does touch it.
	var one int
	if err := db.read.QueryRowContext(ctx, "SELECT 1 FROM schema_migrations LIMIT 1").Scan(&one); err != nil {
		return fmt.Errorf("sqlite ping: %w", err)
	}
	return nil
}

// Close closes both pools. It is safe to call more than once.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		var errs []error
		for _, st := range db.stmts {
			errs = append(errs, st.Close())
		}
		db.closeErr = errors.Join(append(errs, db.read.Close(), db.write.Close())...)
	})
	return db.closeErr
}

// DBStats returns database/sql's statistics of the read and the write pool.
func (db *DB) DBStats() (read, write sql.DBStats) {
	return db.read.Stats(), db.write.Stats()
}

// PoolStats returns the two pools' statistics for /metrics.
func (db *DB) PoolStats() []catalog.PoolStats {
	r, w := db.DBStats()
	return []catalog.PoolStats{poolStats("read", r), poolStats("write", w)}
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

// micros is the stored form of a time: Unix microseconds (see the schema).
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros turns a stored time back into a UTC time.Time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
