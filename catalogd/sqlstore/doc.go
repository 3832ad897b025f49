// Package sqlstore is catalogd's catalog.Store over SQL: one implementation
// of the queries, the scanning, the migrations, the version-checked updates
// and the stock reservations, run against either database through a Dialect.
//
//	db, err := sqlstore.Open(ctx, sqlstore.SQLite, filepath.Join(dataDir, sqlstore.FileName), nil)
//	db, err := sqlstore.Open(ctx, sqlstore.PostgreSQL, "postgres://…", nil)
//
// SQLite (modernc.org/sqlite) is the embedded default: one file under the
// data directory, created, migrated and seeded with the generated
// 10,000-product catalog on first start. PostgreSQL (pgx) is the production
// store, with the same migrations and the same seed.
//
// Both go through database/sql, so that there is one store and not two: the
// differences between the databases are values in a Dialect (how a
// connection opens, the placeholder syntax, how a time is stored, the
// migration DDL and lock, which error means "busy, retry"), not copies of
// each method. PostgreSQL used to be reached through pgx's own pool; over
// database/sql it keeps what that pool gave: pgx still caches each
// statement per connection, the DSN's pool_* settings still size the pool
// (parsed by pgxpool.ParseConfig, applied to database/sql's pool), and the
// pool's statistics are database/sql's. What it gave up is COPY for the
// first start's seed, which is now the same multi-row INSERT as SQLite's,
// in larger batches; seeding happens once per database.
//
// The queries are written once, with PostgreSQL's numbered placeholders
// ($1); the SQLite dialect rewrites them to SQLite's numbered form (?1) when
// the package is initialised. Times are stored as SQLite INTEGER Unix
// microseconds and as PostgreSQL timestamptz (which keeps microseconds);
// both stores truncate every time they write to microseconds and return
// UTC, so the two return the same values.
package sqlstore
