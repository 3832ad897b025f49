package pgtest

import (
	"net"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	code := Main(m)
	// Main has dropped the cluster: nothing of it may be left.
	if shared != nil && !shared.dropped() {
		os.Stderr.WriteString("pgtest: cluster still there after Main\n")
		code = 1
	}
	os.Exit(code)
}

// TestNewDatabase checks what the package promises: a loopback-only server
// on a port other than 5432, a non-superuser role, a fresh database per call.
func TestNewDatabase(t *testing.T) {
	dsn1, dsn2 := NewDatabase(t), NewDatabase(t)
	u, err := url.Parse(dsn1)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	if host != "127.0.0.1" || port == "5432" || port == "" {
		t.Errorf("DSN host %q port %q: want 127.0.0.1 and a port other than 5432", host, port)
	}
	if dsn1 == dsn2 {
		t.Error("two calls returned the same database")
	}
	conn, err := pgx.Connect(t.Context(), dsn1)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var listen, super, db, user string
	if err := conn.QueryRow(t.Context(),
		"SELECT current_setting('listen_addresses'), current_setting('is_superuser'), current_database(), current_user").
		Scan(&listen, &super, &db, &user); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || super != "off" || user != role || "/"+db != u.Path {
		t.Errorf("listen_addresses %q, superuser %q, database %q, user %q", listen, super, db, user)
	}
	// The role owns its database: it can create tables there.
	if _, err := conn.Exec(t.Context(), "CREATE TABLE t (id int)"); err != nil {
		t.Errorf("create table as %s: %v", role, err)
	}
	// A wrong password is refused: the server does not trust loopback.
	bad, _ := url.Parse(dsn1)
	bad.User = url.UserPassword(role, "wrong")
	if c, err := pgx.Connect(t.Context(), bad.String()); err == nil {
		c.Close(t.Context())
		t.Error("connecting with a wrong password succeeded")
	}
}
