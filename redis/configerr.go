package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// Errors of configuration: Redis refusing the tier's credentials or one of
// its commands or keys, and a TLS handshake that fails. No retry fixes
// them, the breaker and the Cache's fallbacks hide them from callers, and a
// client reconnecting in the background meets them again and again; so the
// tier names them in New's error and logs them, at most one line a
// minute with a count, never one per request.

// configErrorKind returns what kind of configuration error err is
// ("authentication", "permission", "TLS"), or "" if it is none.
func configErrorKind(err error) string {
	if err == nil {
		return ""
	}
	// As, not rueidis.IsRedisErr: the Sentinel shape joins the errors of
	// every sentinel it asked.
	if re := (*rueidis.RedisError)(nil); errors.As(err, &re) && re != rueidis.Nil {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"):
			return "authentication"
		case strings.HasPrefix(msg, "NOPERM"):
			return "permission"
		}
		return ""
	}
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		record  tls.RecordHeaderError
		alert   tls.AlertError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) ||
		errors.As(err, &invalid) || errors.As(err, &record) || errors.As(err, &alert) {
		return "TLS"
	}
	return ""
}

// connectError wraps an error of New connecting to addrs, naming its kind
// when it is one of configuration.
func connectError(addrs []string, err error) error {
	if kind := configErrorKind(err); kind != "" {
		return fmt.Errorf("redis tier: connect to %v: %s failed: %w", addrs, kind, err)
	}
	return fmt.Errorf("redis tier: connect to %v: %w", addrs, err)
}

// failureLogInterval is the least time between two lines of a failureLog.
const failureLogInterval = time.Minute

// failureLog logs configuration errors: the first at once, then at most
// one line per failureLogInterval, which counts the errors since the last
// line. It is safe for concurrent use.
type failureLog struct {
	log   *slog.Logger
	now   func() time.Time
	mu    sync.Mutex
	last  time.Time // when the last line was written; zero before the first
	count int       // errors since the last line, not yet logged
}

// failed logs err if it is a configuration error and the last line is
// failureLogInterval old; otherwise it only counts it. A nil failureLog
// (a Tier made by hand in a test) logs nothing.
func (l *failureLog) failed(err error) { l.failedAs(configErrorKind(err), err) }

// failedAs is failed for an error already known to be of kind ("" when it
// is not a configuration error).
func (l *failureLog) failedAs(kind string, err error) {
	if kind == "" || l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	l.count++
	if !l.last.IsZero() && now.Sub(l.last) < failureLogInterval {
		l.mu.Unlock()
		return
	}
	n := l.count
	l.count, l.last = 0, now
	l.mu.Unlock()
	// Logged outside the lock: the handler is the caller's code.
	l.log.Error("redis tier: "+kind+" failed", "error", err, "errors", n, "interval", failureLogInterval)
}
