package postgres

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/catalog/catalogtest"
	"github.com/holdfast-dev/holdfast/catalogd/internal/pgtest"
)

// TestMain shares one throwaway PostgreSQL cluster among all the tests and
// drops it when they are done.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t testing.TB, dsn string) *DB {
	t.Helper()
	start := time.Now()
	db, err := Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Open took %v", time.Since(start))
	t.Cleanup(func() { db.Close() })
	return db
}

func TestStore(t *testing.T) {
	catalogtest.Run(t, func(t *testing.T) catalog.Store { return open(t, pgtest.NewDatabase(t)) })
}

// TestOpenSeedsOnce opens a database twice, and then twice at once: the
// migrations and the seed run once, and what was written survives.
func TestOpenSeedsOnce(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	db := open(t, dsn)
	if _, err := db.UpdateProduct(t.Context(), 1, 1, catalog.ProductUpdate{
		Name: "Kept", PriceCents: 1, Status: catalog.StatusActive, Category: "toys"}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var wg sync.WaitGroup
	dbs := make([]*DB, 2)
	for i := range dbs {
		wg.Go(func() { dbs[i] = open(t, dsn) })
	}
	wg.Wait()
	db = dbs[0]
	var n, versions int
	if err := db.pool.QueryRow(t.Context(), "SELECT count(*) FROM products").Scan(&n); err != nil || n != catalog.SeedSize {
		t.Errorf("products after reopening: %d, %v; want %d", n, err, catalog.SeedSize)
	}
	if err := db.pool.QueryRow(t.Context(), "SELECT count(*) FROM schema_migrations").Scan(&versions); err != nil || versions != len(migrations) {
		t.Errorf("schema_migrations rows: %d, %v; want %d", versions, err, len(migrations))
	}
	if p, err := dbs[1].Product(t.Context(), 1); err != nil || p.Name != "Kept" || p.Version != 2 {
		t.Errorf("Product(1) after reopening = %+v, %v; want the update kept", p, err)
	}
	if st := db.PoolStats(); len(st) != 1 || st[0].MaxOpen < 1 || st[0].Open < 1 {
		t.Errorf("PoolStats = %+v", st)
	}
}

func TestOpenBadDSN(t *testing.T) {
	for _, dsn := range []string{"postgres://u:secret@[::1", "host=127.0.0.1 port=1 user=x password=secret connect_timeout=1"} {
		db, err := Open(t.Context(), dsn, nil)
		if err == nil {
			db.Close()
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
}

// TestQueryPlans checks that the list orders read an index in order rather
// than sorting the table, and that the search is two index range scans.
func TestQueryPlans(t *testing.T) {
	db := open(t, pgtest.NewDatabase(t))
	plan := func(query string, args ...any) string {
		t.Helper()
		rows, err := db.pool.Query(t.Context(), "EXPLAIN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, line)
		}
		return strings.Join(lines, "\n")
	}
	// A page is read from an index in order, never sorted. (The total's
	// count may be a sequential scan: counting 92% of the active rows,
	// that is what the planner should pick.)
	sorts := regexp.MustCompile(`(?m)^\s*(->\s+)?Sort\s`)
	for s := range orderBy {
		for name, p := range map[string]string{
			"list " + string(s):             plan(listSQL[false][s], 20, 0),
			"list by category " + string(s): plan(listSQL[true][s], "toys", 20, 0),
		} {
			if !strings.Contains(p, "Index Scan") || sorts.MatchString(p) {
				t.Errorf("%s sorts instead of reading an index in order:\n%s", name, p)
			}
		}
	}
	p := plan(searchSQL, "com", "con", 10)
	for _, idx := range []string{"products_active_name", "products_active_code"} {
		if !strings.Contains(p, idx) {
			t.Errorf("search does not use %s:\n%s", idx, p)
		}
	}
	t.Logf("search plan:\n%s", p)
}
