package sqlstore

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/catalog/catalogtest"
	"github.com/holdfast-dev/holdfast/catalogd/internal/pgtest"
)

// fixture is one database the tests run on.
type fixture struct {
	d *Dialect
	// empty returns the source of a database Open has never seen.
	empty func(t testing.TB) string
	// seeded returns the source of a database holding exactly the freshly
	// seeded catalog, which Open will find migrated or migrate itself.
	seeded func(t testing.TB) string
}

// PostgreSQL runs on a throwaway cluster (pgtest), one new database per
// call; a missing PostgreSQL fails the tests.
var fixtures = []fixture{
	{d: SQLite, empty: newFile, seeded: seededCopy},
	{d: PostgreSQL, empty: pgtest.NewDatabase, seeded: pgtest.NewDatabase},
}

// TestMain shares one PostgreSQL cluster among the tests and removes the
// SQLite template when they are done.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if template.dir != "" {
		os.RemoveAll(template.dir)
	}
	os.Exit(code)
}

func newFile(t testing.TB) string { return filepath.Join(t.TempDir(), FileName) }

// template is a seeded, closed SQLite file that seededCopy copies, so the
// tests pay for seeding once per test binary and not once per store (the
// race detector makes the translated SQLite several times slower).
var template struct {
	once sync.Once
	path string
	err  error
	dir  string
}

func seededCopy(t testing.TB) string {
	template.once.Do(func() {
		template.dir, template.err = os.MkdirTemp("", "holdfast-sqlite-template-")
		if template.err != nil {
			return
		}
		template.path = filepath.Join(template.dir, FileName)
		start := time.Now()
		db, err := Open(context.Background(), SQLite, template.path, nil)
		if err != nil {
			template.err = err
			return
		}
		template.err = db.Close() // checkpoints the WAL into the file
		t.Logf("first Open of a new SQLite file (schema + %d products seeded) took %v", catalog.SeedSize, time.Since(start))
	})
	if template.err != nil {
		t.Fatal(template.err)
	}
	dst := newFile(t)
	if err := copyFile(dst, template.path); err != nil {
		t.Fatal(err)
	}
	return dst
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func open(t testing.TB, d *Dialect, source string, opts *Options) *DB {
	t.Helper()
	start := time.Now()
	db, err := Open(t.Context(), d, source, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s Open took %v", d.name, time.Since(start))
	t.Cleanup(func() { db.Close() })
	return db
}

// TestStore runs the shared catalog.Store suite on both databases.
func TestStore(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.d.name, func(t *testing.T) {
			catalogtest.Run(t, func(t *testing.T) catalog.Store { return open(t, f.d, f.seeded(t), nil) })
		})
	}
}

// TestOpenSeedsOnce reopens a seeded database, twice at once: the second
// start applies nothing and keeps what was written before it.
func TestOpenSeedsOnce(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.d.name, func(t *testing.T) {
			src := f.seeded(t)
			db := open(t, f.d, src, nil)
			if _, err := db.UpdateProduct(t.Context(), 1, 1, catalog.ProductUpdate{
				Name: "Kept", PriceCents: 1, Status: catalog.StatusActive, Category: "toys"}); err != nil {
				t.Fatal(err)
			}
			db.Close()

			var wg sync.WaitGroup
			dbs := make([]*DB, 2)
			for i := range dbs {
				wg.Go(func() { dbs[i] = open(t, f.d, src, nil) })
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			db = dbs[0]
			var n, versions int
			if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM products").Scan(&n); err != nil || n != catalog.SeedSize {
				t.Errorf("products after reopening: %d, %v; want %d", n, err, catalog.SeedSize)
			}
			if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != len(migrations) {
				t.Errorf("schema_migrations rows: %d, %v; want %d", versions, err, len(migrations))
			}
			if p, err := dbs[1].Product(t.Context(), 1); err != nil || p.Name != "Kept" || p.Version != 2 {
				t.Errorf("Product(1) after reopening = %+v, %v; want the update kept", p, err)
			}
			st := db.PoolStats()
			if len(st) != len(f.d.poolNames) {
				t.Errorf("PoolStats = %+v, want pools %v", st, f.d.poolNames)
			}
			for i, s := range st {
				if s.Name != f.d.poolNames[i] || s.MaxOpen < 1 || s.Open < 1 {
					t.Errorf("PoolStats[%d] = %+v", i, s)
				}
			}
		})
	}
}

// TestOpenConcurrently starts two stores on one new database at once: one
// migrates and seeds, the other waits for its transaction and then finds
// the work done. SQLite's wait is its busy timeout, raised here because the
// race detector makes seeding take seconds rather than a fifth of one.
func TestOpenConcurrently(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.d.name, func(t *testing.T) {
			src := f.empty(t)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i := range errs {
				wg.Go(func() {
					db, err := Open(t.Context(), f.d, src, &Options{BusyTimeout: time.Minute})
					if err == nil {
						err = db.Close()
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			db := open(t, f.d, src, nil)
			var n, versions int
			if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM products").Scan(&n); err != nil || n != catalog.SeedSize {
				t.Errorf("products: %d, %v; want %d", n, err, catalog.SeedSize)
			}
			if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != len(migrations) {
				t.Errorf("schema_migrations rows: %d, %v; want %d", versions, err, len(migrations))
			}
		})
	}
}

func TestOpenBadSource(t *testing.T) {
	for _, c := range []struct {
		d      *Dialect
		source string
	}{
		{SQLite, ""},
		{SQLite, filepath.Join(t.TempDir(), "a?b.db")},
		{PostgreSQL, "postgres://u:secret@[::1"},
		{PostgreSQL, "host=127.0.0.1 port=1 user=x password=secret connect_timeout=1"},
	} {
		db, err := Open(t.Context(), c.d, c.source, nil)
		if err == nil {
			db.Close()
			t.Errorf("Open(%s, %q) succeeded", c.d.name, c.source)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
}

// TestSQLiteFile checks what the SQLite dialect's two pools promise: the
// file is in WAL mode and the read pool cannot write.
func TestSQLiteFile(t *testing.T) {
	db := open(t, SQLite, seededCopy(t), nil)
	var mode string
	if err := db.write.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if _, err := db.read.ExecContext(t.Context(), "DELETE FROM products"); err == nil {
		t.Error("a write through the read pool succeeded")
	}
}

func TestBind(t *testing.T) {
	for _, c := range []struct {
		d        *Dialect
		in, want string
	}{
		{SQLite, "a = $1 AND b < $12 LIMIT $3", "a = ?1 AND b < ?12 LIMIT ?3"},
		{PostgreSQL, "a = $1 AND b < $12 LIMIT $3", "a = $1 AND b < $12 LIMIT $3"},
		{SQLite, "price $ 5", "price $ 5"},
	} {
		if got := c.d.bind(c.in); got != c.want {
			t.Errorf("%s bind(%q) = %q, want %q", c.d.name, c.in, got, c.want)
		}
	}
}

// TestQueryPlans checks that every list order reads an index in order
// rather than scanning and sorting the table, and that the search is two
// index range scans, on both databases.
func TestQueryPlans(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.d.name, func(t *testing.T) {
			db := open(t, f.d, f.seeded(t), nil)
			check := checkSQLitePlan
			if f.d == PostgreSQL {
				check = checkPostgresPlan
			}
			for s := range orderBy {
				check(t, "list "+string(s), explain(t, db, listSQL[false][s], 20, 0))
				check(t, "list by category "+string(s), explain(t, db, listSQL[true][s], "toys", 20, 0))
			}
			if f.d == SQLite {
				// PostgreSQL may rightly count 92% of the active rows
				// with a sequential scan.
				check(t, "count", explain(t, db, countAll))
				check(t, "count by category", explain(t, db, countByCat, "toys"))
			}
			p := explain(t, db, searchSQL, "com", "con", 10)
			for _, idx := range []string{"products_active_name", "products_active_code"} {
				if !strings.Contains(p, idx) {
					t.Errorf("search does not use %s:\n%s", idx, p)
				}
			}
			t.Logf("search plan:\n%s", p)
		})
	}
}

// explain returns the database's plan of query, one line per step.
func explain(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	prefix := "EXPLAIN "
	if db.d == SQLite {
		prefix = "EXPLAIN QUERY PLAN "
	}
	rows, err := db.read.QueryContext(t.Context(), prefix+db.d.bind(query), args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		// The plan's text is the last column: SQLite's has id, parent
		// and notused before it.
		dest := make([]any, len(cols))
		for i := range dest {
			dest[i] = new(any)
		}
		var line string
		dest[len(dest)-1] = &line
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func checkSQLitePlan(t *testing.T, name, p string) {
	t.Helper()
	if !strings.Contains(p, "USING INDEX") && !strings.Contains(p, "USING COVERING INDEX") {
		t.Errorf("%s: no index used:\n%s", name, p)
	}
	if strings.Contains(p, "USE TEMP B-TREE FOR ORDER BY") {
		t.Errorf("%s: sorts instead of reading in index order:\n%s", name, p)
	}
	if strings.Contains(p, "SCAN products\n") || strings.HasSuffix(p, "SCAN products") {
		t.Errorf("%s: scans the table:\n%s", name, p)
	}
}

// checkPostgresPlan: a page is read from an index in order, never sorted.
// (The total's count may be a sequential scan: counting 92% of the active
// rows, that is what the planner should pick.)
func checkPostgresPlan(t *testing.T, name, p string) {
	t.Helper()
	for _, l := range strings.Split(p, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		if strings.HasPrefix(l, "Sort ") {
			t.Errorf("%s sorts instead of reading an index in order:\n%s", name, p)
		}
	}
	if !strings.Contains(p, "Index Scan") {
		t.Errorf("%s reads no index:\n%s", name, p)
	}
}

// benchStores runs read in parallel on a seeded store of each database; i
// counts each goroutine's calls.
func benchStores(b *testing.B, read func(ctx context.Context, db *DB, i int) error) {
	for _, f := range fixtures {
		b.Run(f.d.name, func(b *testing.B) {
			db := open(b, f.d, f.seeded(b), nil)
			ctx := b.Context()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					if err := read(ctx, db, i); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func BenchmarkProduct(b *testing.B) {
	benchStores(b, func(ctx context.Context, db *DB, i int) error {
		_, err := db.Product(ctx, int64(i%catalog.SeedSize+1))
		return err
	})
}

func BenchmarkSearch(b *testing.B) {
	prefixes := []string{"co", "pro", "midnight s", "p0012", "zz"}
	benchStores(b, func(ctx context.Context, db *DB, i int) error {
		_, err := db.Search(ctx, prefixes[i%len(prefixes)], 10)
		return err
	})
}

func BenchmarkProducts(b *testing.B) {
	benchStores(b, func(ctx context.Context, db *DB, i int) error {
		q := catalog.ListQuery{Category: catalog.Categories()[i%20], Page: 1 + i%5, Sort: catalog.SortPrice}
		_, err := db.Products(ctx, q)
		return err
	})
}

// TestScansLeavePointReadsTheirConnections, on both databases: with every
// scan token held, as under a flood of searches, a search or a list page
// waits for one (here until its context ends) while product and stock
// reads go on at once on the connections kept for them.
func TestScansLeavePointReadsTheirConnections(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.d.name, func(t *testing.T) {
			db := open(t, f.d, f.seeded(t), &Options{MaxConns: 5})
			if got, want := cap(db.scans), 5-PointConns; got != want {
				t.Fatalf("scan tokens %d, want MaxConns − PointConns = %d", got, want)
			}
			ctx := t.Context()
			for range cap(db.scans) {
				if _, err := db.scan(ctx); err != nil {
					t.Fatal(err)
				}
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := db.Search(short, "a", 10); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
				t.Fatalf("search with every scan token held: %v, want it to wait until its deadline", err)
			}
			if _, err := db.Products(short, catalog.ListQuery{}); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
				t.Fatalf("list page with every scan token held: %v, want it to wait until its deadline", err)
			}
			for id := int64(1); id <= 20; id++ {
				if _, err := db.Product(ctx, id); err != nil {
					t.Fatalf("product %d with every scan token held: %v", id, err)
				}
				if _, err := db.Stock(ctx, id); err != nil {
					t.Fatalf("stock %d with every scan token held: %v", id, err)
				}
			}
			for range cap(db.scans) {
				db.releaseScan()
			}
			if res, err := db.Search(ctx, "a", 10); err != nil || len(res) == 0 {
				t.Fatalf("search once the tokens are back: %d results, %v", len(res), err)
			}
		})
	}
}
