package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Dialect is everything the store does differently on one database. There
// are two, SQLite and PostgreSQL; the fields are unexported so that a
// Dialect is always one of them.
type Dialect struct {
	// name starts every error ("sqlite product 7: …") and Open's log line.
	name string

	// open makes the database's pools from Open's source: the pool the
	// reads use and the pool the writes and migrations use, which may be
	// the same pool. It returns before connecting when the driver allows.
	open func(ctx context.Context, source string, o Options) (read, write *sql.DB, err error)

	// sourceInErrors says whether Open's errors may quote the source: a
	// file path helps, a DSN can hold a password.
	sourceInErrors bool

	// poolNames name the pools in PoolStats: two names for a read and a
	// write pool, one for a shared pool.
	poolNames []string

	// placeholder starts a numbered bind parameter: "$" for $1, "?" for ?1.
	// The queries are written with "$".
	placeholder string

	// timeAsMicros stores a time as int64 Unix microseconds (a column
	// SQLite compares exactly) instead of as the driver's time type.
	timeAsMicros bool

	// migrationsTable creates schema_migrations if it is missing.
	migrationsTable string

	// lockMigrations runs first in the migration transaction, so that
	// processes starting on one database together apply each step once;
	// empty where beginning the transaction already takes the lock.
	lockMigrations string

	// schema is migration 1.
	schema string

	// seedBatch is how many rows one INSERT of the seed carries.
	seedBatch int

	// afterSeed runs after the seed, in its transaction; may be empty.
	afterSeed string

	// busy reports an error after which the migration transaction, which
	// checks what is applied first, may be run again; nil when no error
	// is.
	busy func(error) bool
}

// bind rewrites a query written with $1-style placeholders into the
// dialect's form. Queries hold no '$' other than placeholders.
func (d *Dialect) bind(query string) string {
	if d.placeholder == "$" {
		return query
	}
	var b strings.Builder
	b.Grow(len(query))
	for i := 0; i < len(query); i++ {
		if query[i] == '$' && i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9' {
			b.WriteString(d.placeholder)
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// param is the n-th (from 1) bind parameter in the dialect's form.
func (d *Dialect) param(n int) string { return d.placeholder + fmt.Sprint(n) }

// stamp is what a written time becomes: UTC, microseconds, what both
// databases keep, so the value a write returns is the value stored.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// timeArg is t as the dialect stores it.
func (d *Dialect) timeArg(t time.Time) any {
	if d.timeAsMicros {
		return t.UnixMicro()
	}
	return stamp(t)
}

// timeDest scans a stored time in either form (Unix microseconds or the
// driver's time) into a UTC time.Time.
type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*d.t = time.UnixMicro(v).UTC()
	case time.Time:
		*d.t = v.UTC()
	default:
		return fmt.Errorf("stored time of type %T", src)
	}
	return nil
}
