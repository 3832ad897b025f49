package sqlite

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
)

// template is a seeded, closed catalog file that newStore copies, so the
// suite pays for seeding once per test binary and not once per store (the
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
		template.path = filepath.Join(template.dir, "catalog.db")
		start := time.Now()
		db, err := Open(context.Background(), template.path, nil)
		if err != nil {
			template.err = err
			return
		}
		template.err = db.Close() // checkpoints the WAL into the file
		t.Logf("first Open of a new file (schema + %d products seeded) took %v", catalog.SeedSize, time.Since(start))
	})
	if template.err != nil {
		t.Fatal(template.err)
	}
	dst := filepath.Join(t.TempDir(), "catalog.db")
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

func TestMain(m *testing.M) {
	code := m.Run()
	if template.dir != "" {
		os.RemoveAll(template.dir)
	}
	os.Exit(code)
}

func open(t testing.TB, path string) *DB {
	t.Helper()
	db, err := Open(t.Context(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestStore(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalog.Store { return open(t, seededCopy(t)) })
}

// TestOpenSeedsOnce reopens a seeded file (the template's first Open ran the
// migrations and the seed, and logged how long that took): the second start
// applies nothing and keeps what was written before it.
func TestOpenSeedsOnce(t *testing.T) {
	path := seededCopy(t)
	db := open(t, path)
	if _, err := db.UpdateProduct(t.Context(), 1, 1, catalog.ProductUpdate{
		Name: "Kept", PriceCents: 1, Status: catalog.StatusActive, Category: "toys"}); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.write.QueryRowContext(t.Context(), "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	db.Close()

	start := time.Now()
	db = open(t, path)
	t.Logf("second Open took %v", time.Since(start))
	var n, versions int
	if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM products").Scan(&n); err != nil || n != catalog.SeedSize {
		t.Errorf("products after reopening: %d, %v; want %d", n, err, catalog.SeedSize)
	}
	if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != len(migrations) {
		t.Errorf("schema_migrations rows: %d, %v; want %d", versions, err, len(migrations))
	}
	if p, err := db.Product(t.Context(), 1); err != nil || p.Name != "Kept" || p.Version != 2 {
		t.Errorf("Product(1) after reopening = %+v, %v; want the update kept", p, err)
	}
	// The read pool cannot write, whatever a bug might send it.
	if _, err := db.read.ExecContext(t.Context(), "DELETE FROM products"); err == nil {
		t.Error("a write through the read pool succeeded")
	}
}

func TestOpenConcurrently(t *testing.T) {
	// Two stores starting on one new file at once: one seeds, the other
	// waits for its transaction and then finds the work done. The wait is
	// SQLite's busy timeout, raised here because the race detector makes
	// seeding take seconds rather than a fifth of one.
	path := filepath.Join(t.TempDir(), "catalog.db")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			db, err := Open(t.Context(), path, &Options{BusyTimeout: time.Minute})
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
	db := open(t, path)
	var n int
	if err := db.read.QueryRowContext(t.Context(), "SELECT count(*) FROM products").Scan(&n); err != nil || n != catalog.SeedSize {
		t.Errorf("products: %d, %v; want %d", n, err, catalog.SeedSize)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", filepath.Join(t.TempDir(), "a?b.db")} {
		if db, err := Open(t.Context(), p, nil); err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestQueryPlans checks that every list order and the search use an index
// rather than a scan of the table followed by a sort.
func TestQueryPlans(t *testing.T) {
	db := open(t, seededCopy(t))
	plan := func(query string, args ...any) string {
		t.Helper()
		rows, err := db.read.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n")
	}
	check := func(name, p string) {
		t.Helper()
		if !strings.Contains(p, "USING INDEX") && !strings.Contains(p, "USING COVERING INDEX") {
			t.Errorf("%s: no index used:\n%s", name, p)
		}
		if strings.Contains(p, "USE TEMP B-TREE FOR ORDER BY") && !strings.Contains(name, "search") {
			t.Errorf("%s: sorts instead of reading in index order:\n%s", name, p)
		}
		if strings.Contains(p, "SCAN products\n") || strings.HasSuffix(p, "SCAN products") {
			t.Errorf("%s: scans the table:\n%s", name, p)
		}
	}
	for s := range orderBy {
		check("list "+string(s), plan(listSQL[false][s], 20, 0))
		check("list by category "+string(s), plan(listSQL[true][s], "toys", 20, 0))
	}
	check("count", plan(countAll))
	check("count by category", plan(countByCat, "toys"))
	p := plan(searchSQL, "com", "con", 10)
	check("search", p)
	for _, idx := range []string{"products_active_name", "products_active_code"} {
		if !strings.Contains(p, idx) {
			t.Errorf("search does not use %s:\n%s", idx, p)
		}
	}
	t.Logf("search plan:\n%s", p)
}

func BenchmarkProduct(b *testing.B) {
	db := open(b, seededCopy(b))
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := int64(1)
		for pb.Next() {
			if _, err := db.Product(ctx, id); err != nil {
				b.Fatal(err)
			}
			id = id%catalog.SeedSize + 1
		}
	})
}

func BenchmarkSearch(b *testing.B) {
	db := open(b, seededCopy(b))
	ctx := b.Context()
	prefixes := []string{"co", "pro", "midnight s", "p0012", "zz"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := db.Search(ctx, prefixes[i%len(prefixes)], 10); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

func BenchmarkProducts(b *testing.B) {
	db := open(b, seededCopy(b))
	ctx := b.Context()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			q := catalog.ListQuery{Category: catalog.Categories()[i%20], Page: 1 + i%5, Sort: catalog.SortPrice}
			if _, err := db.Products(ctx, q); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
