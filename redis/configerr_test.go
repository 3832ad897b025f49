package redis

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFailureLog: configuration errors are logged at once, then at most
// one line per interval carrying the count since the last line; other
// errors are not logged. (The Redis replies WRONGPASS and NOPERM are
// classified in the tests against a real server: auth_test.go, acl_test.go.)
func TestFailureLog(t *testing.T) {
	logs, logger := newLogBuffer()
	now := time.Unix(1000, 0)
	l := &failureLog{log: logger, now: func() time.Time { return now }}
	untrusted := fmt.Errorf("redis tier get %q: %w", "k", x509.UnknownAuthorityError{})

	for i := 0; i < 100; i++ {
		l.failed(untrusted)
		l.failed(errors.New("connection reset by peer")) // not one of configuration
		now = now.Add(100 * time.Millisecond)            // 10 s in all
	}
	if lines := logs.lines("redis tier: TLS failed"); len(lines) != 1 || !strings.Contains(lines[0], "errors=1 ") {
		t.Fatalf("in 10 s: %q, want one line for one error", lines)
	}
	now = now.Add(failureLogInterval)
	l.failed(untrusted)
	lines := logs.lines("redis tier: TLS failed")
	// The second line counts the 99 errors the first did not stand for,
	// and its own.
	if len(lines) != 2 || !strings.Contains(lines[1], "errors=100 ") {
		t.Fatalf("after the interval: %q, want a second line for 100 errors", lines)
	}
	if n := len(logs.lines("connection reset")); n != 0 {
		t.Fatalf("a connection error was logged %d times", n)
	}
	var nilLog *failureLog
	nilLog.failed(untrusted) // a Tier made by hand has none: no panic
}
