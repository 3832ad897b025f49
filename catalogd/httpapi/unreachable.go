package httpapi

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
)

// unreachable reports whether err says the database could not be reached,
// as opposed to a query it answered with an error: a dial or read that
// failed on the network, a connection the server closed or refused (in the
// middle of a message: unexpected EOF), or the store's pool closed. Such a load with nothing stale to serve is a 503 with
// Retry-After, like the limiter's rejection: the client did nothing wrong
// and the same request will work once the database is back; a 500 would say
// catalogd is broken.
//
// It needs no driver import: a net.Error anywhere in the chain is what pgx
// and database/sql return for a refused or broken connection, and
// PostgreSQL's own refusals carry an SQLSTATE (class 08, connection
// exception; 57P01-57P03, the server shutting down or starting;
// 53300, too many connections), which pgx's errors report through
// SQLState().
func unreachable(err error) bool {
	var ne net.Error
	var se interface{ SQLState() string }
	switch {
	case errors.As(err, &ne), errors.Is(err, net.ErrClosed), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &se):
		switch c := se.SQLState(); {
		case strings.HasPrefix(c, "08"), c == "57P01", c == "57P02", c == "57P03", c == "53300":
			return true
		}
	}
	// database/sql does not export the errors of a closed pool or of a
	// statement prepared on it.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if m := e.Error(); m == "sql: database is closed" || m == "sql: statement is closed" {
			return true
		}
	}
	return false
}

// redactions are what redact removes from an error before it is logged.
var redactions = []struct {
	re   *regexp.Regexp
	with string
}{
	// URLs, which a DSN can be (postgres://user:password@host/db).
	{regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://\S+`), "[url]"},
	// pgx quotes the user and database in backticks: "failed to connect
	// to `user=app database=shop`".
	{regexp.MustCompile("`[^`]*`"), "`[redacted]`"},
	// pgx names each address it dialled with the host it came from:
	// "db.internal:5432 (db.internal)".
	{regexp.MustCompile(`\S+:\d+ \([^)]*\)`), "[host]"},
	// Addresses: "dial tcp 10.0.0.5:5432", "[::1]:5432".
	{regexp.MustCompile(`(\[[0-9a-fA-F:.%\w]*\]|[\w.-]+):\d{1,5}\b`), "[host]"},
	// Server messages that quote names: `password authentication failed
	// for user "app"`, `database "shop" does not exist`.
	{regexp.MustCompile(`\b(user|role|database) "[^"]*"`), `$1 "[redacted]"`},
}

// redact removes the database's host, user and database, and any URL, from
// an error message before it is logged: the log is read by more people, and
// kept longer, than the DSN.
func redact(msg string) string {
	for _, r := range redactions {
		msg = r.re.ReplaceAllString(msg, r.with)
	}
	return msg
}
