package sqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

//go:embed migrations/sqlite_0001_schema.sql
var sqliteSchema string

// FileName is the SQLite catalog file's name inside catalogd's data
// directory.
const FileName = "catalog.db"

// SQLite is the embedded database: Open's source is the file's path (for
// catalogd, filepath.Join(dataDir, FileName)); the file and its directory
// are created if need be. The driver is modernc.org/sqlite, SQLite
// translated to Go: no cgo and no C toolchain, so `go run ./catalogd` works
// on a fresh machine with nothing but Go installed.
//
// SQLite allows any number of readers but one writer at a time, so the
// store keeps two pools on the same file. Reads go to a pool of several
// connections opened with query_only, which in WAL mode read a consistent
// snapshot without ever waiting for the writer. Writes go to a pool of
// exactly one connection: writers then queue in Go, in database/sql's pool,
// where a context deadline ends the wait, instead of each holding its own
// connection and polling SQLite's lock with the busy handler. The busy
// timeout is still set, for another process (a second catalogd, the sqlite3
// shell) holding the lock.
var SQLite = &Dialect{
	name:           "sqlite",
	open:           openSQLite,
	sourceInErrors: true,
	poolNames:      []string{"read", "write"},
	placeholder:    "?",
	timeAsMicros:   true,
	migrationsTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`,
	// BEGIN IMMEDIATE (the write pool's _txlock) takes the write lock
	// before schema_migrations is read: a second process waits, then
	// finds nothing to do.
	lockMigrations: "",
	schema:         sqliteSchema,
	// Each statement execution crosses from Go into the translated SQLite
	// and back, which costs more than SQLite's own work for a row; 100
	// rows of 10 columns stay far below SQLite's 32,766 bound parameters.
	seedBatch: 100,
	afterSeed: "",
	busy:      sqliteBusy,
}

// sqliteBusy reports SQLITE_BUSY. The busy timeout does not cover every
// lock a new file goes through: while another process switches the file to
// WAL or recovers its WAL index, SQLite answers SQLITE_BUSY at once rather
// than call the busy handler (seen with two processes opening a new file
// together), so Open retries the migrations for up to the busy timeout.
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

func openSQLite(_ context.Context, path string, o Options) (read, write *sql.DB, err error) {
	if path == "" || strings.ContainsRune(path, '?') {
		// The driver splits its DSN at the first '?'.
		return nil, nil, errors.New("path is empty or contains '?'")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, nil, err
	}
	// The write pool's DSN turns WAL on, which is a property of the file;
	// Open runs the migrations on it before any reader connects.
	// _txlock=immediate makes BEGIN take the write lock at once, so a
	// transaction never fails halfway when it tries to upgrade a read lock
	// that another writer has overtaken.
	write, err = sql.Open("sqlite", sqliteDSN(path, o.BusyTimeout, "_txlock=immediate"))
	if err != nil {
		return nil, nil, err
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0) // a file has no server to rebalance to

	read, err = sql.Open("sqlite", sqliteDSN(path, o.BusyTimeout, "_query_only=1"))
	if err != nil {
		write.Close()
		return nil, nil, err
	}
	// Readers do not block each other in WAL mode, and more connections
	// than cores only add memory (each has its own page cache).
	n := o.MaxConns
	if n == 0 {
		n = max(4, runtime.GOMAXPROCS(0))
	}
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n) // keep them: opening one re-reads the schema
	read.SetConnMaxLifetime(0)
	return read, write, nil
}

// sqliteDSN builds the driver's data source name. synchronous=NORMAL is the
// usual WAL setting: a commit survives a crash of the process, and a power
// cut can only lose the last commits, never corrupt the file.
func sqliteDSN(path string, busy time.Duration, extra string) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busy.Milliseconds()))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_foreign_keys", "1")
	return path + "?" + q.Encode() + "&" + extra
}
