package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/breaker"
)

// Options configures a Tier. The zero value of every field but Addrs means
// the documented default.
type Options struct {
	// Addrs are the "host:port" addresses of the Redis server (one address)
	// or of some Cluster nodes (the rest are discovered). Whether it is a
	// Cluster is detected by asking the server (CLUSTER SLOTS). Required.
	Addrs []string

	// Username and Password authenticate with AUTH (ACL user, or only a
	// password for requirepass). Default: no AUTH.
	Username string
	Password string

	// TLS, when non-nil, connects with TLS. Default: plain TCP.
	TLS *tls.Config

	// KeyPrefix is prepended verbatim to every key, to share one Redis
	// between applications or environments (e.g. "shop:"). The Cache passes
	// keys already qualified as "<namespace>:<key>", and a namespace cannot
	// contain ':', so two namespaces never collide as long as every process
	// sharing a key space uses the same KeyPrefix. Default "".
	KeyPrefix string

	// ReadBudget bounds how long a Get or GetMany waits on Redis. Past it
	// the read returns an error wrapping context.DeadlineExceeded (a
	// failure, counted as a timeout and by the breaker) and the late answer
	// is dropped. The caller's own ctx deadline, when earlier, wins.
	// Default 50 ms.
	ReadBudget time.Duration

	// WriteTimeout bounds how long a Set or Delete waits on Redis. Default
	// 100 ms (seed 001's command timeout).
	WriteTimeout time.Duration

	// DialTimeout bounds connecting and the connection handshake (HELLO,
	// AUTH) when no earlier deadline applies: in New and in the client's
	// background reconnects. A read that has to reconnect is still bounded
	// by ReadBudget. Default 1 s.
	DialTimeout time.Duration

	// ConnTimeout closes a connection that has had a request outstanding
	// for this long without any reply; the client also PINGs idle
	// connections every second to find silent ones (rueidis's
	// ConnWriteTimeout). It frees a connection to a frozen server so the
	// next call reconnects instead of queueing behind it. Default 1 s
	// (rueidis's default is 10 s).
	ConnTimeout time.Duration

	// MaxKeyBytes is the largest key accepted, KeyPrefix included. A longer
	// key is refused with an error wrapping holdfast.ErrTooLarge and nothing
	// is sent. Default 1 KiB.
	MaxKeyBytes int

	// MaxValueBytes is the largest value Set accepts; a larger one is
	// refused with an error wrapping holdfast.ErrTooLarge and nothing is
	// sent. Default 1 MiB.
	MaxValueBytes int

	// Breaker configures the tier's circuit breaker.
	Breaker BreakerOptions

	// Clock is the breaker's clock. Default time.Now; tests inject a fake.
	Clock func() time.Time
}

// BreakerOptions configures the breaker in front of Redis. The zero value
// means the defaults. While the breaker is open, every call skips Redis and
// returns an error wrapping holdfast.ErrBypassed.
type BreakerOptions struct {
	// ConsecutiveFailures opens the breaker after this many failed calls in
	// a row. Default 5.
	ConsecutiveFailures int
	// FailureRate opens the breaker when at least this share of the calls
	// in Window failed, once Window holds MinCalls calls. Default 0.5.
	FailureRate float64
	// MinCalls is the number of calls in Window below which FailureRate does
	// not apply. Default 20.
	MinCalls int
	// Window is the rolling window for FailureRate. Default 10 s.
	Window time.Duration
	// OpenTimeout is how long the breaker stays open before letting probes
	// through; it doubles each time a probe fails, up to MaxOpenTimeout, and
	// resets when the breaker closes. Default 1 s.
	OpenTimeout time.Duration
	// MaxOpenTimeout caps OpenTimeout's backoff. Default 30 s.
	MaxOpenTimeout time.Duration
	// Probes is how many calls a half-open breaker lets through, and how
	// many successes close it. Default 3.
	Probes int
}

// Defaults of Options.
const (
	DefaultReadBudget    = 50 * time.Millisecond
	DefaultWriteTimeout  = 100 * time.Millisecond
	DefaultDialTimeout   = time.Second
	DefaultConnTimeout   = time.Second
	DefaultMaxKeyBytes   = 1 << 10
	DefaultMaxValueBytes = 1 << 20
)

// withDefaults validates o and returns a copy with the defaults filled in.
func (o Options) withDefaults() (Options, breaker.Settings, error) {
	if len(o.Addrs) == 0 {
		return o, breaker.Settings{}, errors.New("redis tier: no Addrs")
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return o, breaker.Settings{}, fmt.Errorf("redis tier: address %q: %w", a, err)
		}
	}
	o.Addrs = append([]string(nil), o.Addrs...)
	if o.ReadBudget < 0 || o.WriteTimeout < 0 || o.DialTimeout < 0 || o.ConnTimeout < 0 ||
		o.MaxKeyBytes < 0 || o.MaxValueBytes < 0 {
		return o, breaker.Settings{}, errors.New("redis tier: negative option")
	}
	if o.ReadBudget == 0 {
		o.ReadBudget = DefaultReadBudget
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ConnTimeout == 0 {
		o.ConnTimeout = DefaultConnTimeout
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if len(o.KeyPrefix) >= o.MaxKeyBytes {
		return o, breaker.Settings{}, fmt.Errorf("redis tier: KeyPrefix is %d bytes, MaxKeyBytes %d", len(o.KeyPrefix), o.MaxKeyBytes)
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		// A hash tag in the prefix would put every key in one Cluster slot.
		return o, breaker.Settings{}, fmt.Errorf("redis tier: KeyPrefix %q contains a hash tag brace", o.KeyPrefix)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	b := o.Breaker
	return o, breaker.Settings{
		ConsecutiveFailures: b.ConsecutiveFailures,
		FailureRate:         b.FailureRate,
		MinCalls:            b.MinCalls,
		Window:              b.Window,
		OpenTimeout:         b.OpenTimeout,
		MaxOpenTimeout:      b.MaxOpenTimeout,
		Probes:              b.Probes,
	}, nil
}
