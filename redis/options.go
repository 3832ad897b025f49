package redis

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Options configures a Tier. The zero value of every field but Addrs (or
// Sentinel's Addrs and MasterName) means the documented default.
type Options struct {
	// Addrs are the "host:port" addresses of the Redis server (one address)
	// or of some Cluster nodes (the rest are discovered). Whether it is a
	// Cluster is detected by asking the server (CLUSTER SLOTS). Required,
	// unless Sentinel.Addrs is set, and then empty: the primary is found
	// through the sentinels.
	Addrs []string

	// Sentinel, with its Addrs and MasterName set, makes the tier talk to
	// the primary that Redis Sentinel names, and follow it when it fails
	// over (sentinel.go). Default: no Sentinel.
	Sentinel SentinelOptions

	// Username and Password authenticate with AUTH (ACL user, or only a
	// password for requirepass), to every data node: the primary and
	// replicas of a Sentinel group too, but not the sentinels, which
	// Sentinel.Username and Sentinel.Password are for. Default: no AUTH.
	Username string
	Password string

	// TLS, when non-nil, connects with TLS, to every node of a Cluster
	// and of a Sentinel group too (the sentinels take Sentinel.TLS).
	// Default: plain TCP.
	TLS *tls.Config

	// Logger receives errors of configuration that retrying cannot fix:
	// Redis refusing the credentials (WRONGPASS, NOAUTH) or a command or
	// key (NOPERM, an ACL that does not cover KeyPrefix), and TLS
	// handshake failures, whether New, Lazy's background connects or a
	// call meets them. The first is logged at once, then at most one line
	// a minute with a count. In the Sentinel shape it also receives a line
	// (Info) each time the tier follows the sentinels to a new primary.
	// Default: slog.Default().
	Logger *slog.Logger

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
	// 100 ms (the command timeout a production autocomplete service adopted
	// after a Redis outage).
	WriteTimeout time.Duration

	// DialTimeout bounds connecting and the connection handshake (HELLO,
	// AUTH) when no earlier deadline applies: in New and in the client's
	// background reconnects. A read that has to reconnect is still bounded
	// by ReadBudget. Default 1 s.
	DialTimeout time.Duration

	// PingTimeout is how long a PING may go unanswered before its
	// connection is closed (rueidis's ConnWriteTimeout): every second a
	// connection that received nothing since the previous second is sent
	// a PING.
	// It frees a connection to a frozen server so the next call reconnects
	// instead of queueing behind it, two to three seconds after the
	// freeze. In a Cluster with per-node health, a connection is PINGed
	// after 10 s idle instead of 1 s (a PING a second on every idle
	// connection of every process is most of what an idle fleet would
	// cost a node), and node connections have the watchdog of
	// ClusterOptions.SilentConnTimeout, which closes them one second after
	// a request went unanswered; a connection of the tier's own Cluster
	// client (keyless commands, redirects followed) to a frozen node is
	// freed 10 to 20 s after the freeze. Default 1 s (rueidis's default is
	// 10 s).
	PingTimeout time.Duration

	// MaxKeyBytes is the largest key accepted, KeyPrefix included. A longer
	// key is refused with an error wrapping holdfast.ErrTooLarge and nothing
	// is sent. Default 1 KiB.
	MaxKeyBytes int

	// MaxStoredBytes is the largest value Set accepts, as stored: the
	// Cache's envelope adds at most tier.HeaderSize bytes to every value,
	// so the default, 1 MiB + tier.HeaderSize, takes every value that the
	// Cache's default Policy.MaxValueBytes (1 MiB) lets it cache. A larger
	// one is refused with an error wrapping holdfast.ErrTooLarge and nothing
	// is sent.
	MaxStoredBytes int

	// Breaker configures the tier's circuit breaker.
	Breaker BreakerOptions

	// Cluster configures per-node health and read routing; it applies only
	// when the server is a Redis Cluster. See ClusterOptions.
	Cluster ClusterOptions

	// Stream configures the announcements of invalidations to every
	// process (stream.go).
	Stream StreamOptions

	// Clock tells the time to the breaker and the per-node health, as
	// holdfast.Options.Clock does to the Cache. Default: the system clock;
	// tests inject a fake.
	Clock holdfast.Clock
}

// BreakerOptions configures the breaker in front of Redis: the breaker's
// own settings, not a copy of them. The zero value means the defaults
// (ConsecutiveFailures 5; SilentFailures 1, a call to a standalone server
// that timed out when it had answered no call for a whole read budget, nor
// then two PINGs of 250 ms, a frozen or cut-off server; a timeout with the
// server seen answering around it counts toward FailureRate only, since
// on a busy host it is a late scheduler, not a lost server; reads are
// bypassed while those PINGs are out, writes are not; FailureRate 0.5 once the 10 s Window holds MinRequests 20 calls;
// OpenTimeout 1 s doubling up to MaxOpenTimeout 30 s; Probes 3). While the breaker is open, every call skips Redis and returns an
// error wrapping tier.ErrBypassed.
type BreakerOptions = breaker.Settings

// ClusterOptions configures per-node health in Cluster mode: per-node
// ejection with probes, the silent-connection watchdog, replica readiness
// and random read routing (see nodes.go). The zero value means the
// defaults; a standalone server ignores it. In the Sentinel shape the
// same settings govern the reads of the group's replicas (readiness,
// ejection and probes, PrimaryAfterWrite; sentinel_reads.go).
type ClusterOptions struct {
	// Disabled turns per-node health off: reads and writes then go through
	// rueidis's own Cluster routing, to primaries only, as the tier did
	// before it had per-node health. In the Sentinel shape it sends every
	// read to the primary. Default false.
	Disabled bool

	// ConsecutiveFailures ejects a node after this many failed requests in
	// a row (timeouts and connection errors alike). Default 3.
	ConsecutiveFailures int
	// FailureRate ejects a node when at least this share of its requests
	// in Window failed, once Window holds MinRequests requests. Default 0.5.
	FailureRate float64
	// MinRequests is the number of requests in Window below which
	// FailureRate does not apply. Default 20.
	MinRequests int
	// Window is the rolling window for FailureRate. Default 10 s.
	Window time.Duration

	// ProbeInterval is the first wait before an ejected node is probed
	// with a PING; it doubles after each failed probe up to
	// MaxProbeInterval. Each wait is jittered to between half and all of
	// its value. A successful probe brings the node back. Default 250 ms.
	ProbeInterval time.Duration
	// MaxProbeInterval caps ProbeInterval's backoff, and so bounds how
	// long a node that answers again goes without reads: it is back within
	// MaxProbeInterval plus one probe's round trip. Default 1 s: a probe is
	// one PING per ejected node per process, which even a fleet's worth of
	// processes sends a recovering server at no cost worth saving, while
	// every second a returned node is left out its share of the keys is
	// read from replicas or last-known-good.
	MaxProbeInterval time.Duration
	// ProbeTimeout bounds a probe PING. Default 100 ms.
	ProbeTimeout time.Duration

	// MaxEjectedShare caps the share of known nodes ejected at once (at
	// least one node may always be ejected). A node that would be ejected
	// past the cap stays in (fail-open) and its failures count against the
	// tier's breaker instead. Default 0.5.
	MaxEjectedShare float64

	// SilentConnTimeout closes a node connection that has had a request
	// outstanding and nothing received for this long; its requests fail at
	// once and the next request reconnects. Default 1 s.
	SilentConnTimeout time.Duration

	// ReadinessInterval is how often the nodes' INFO replication and
	// persistence are polled in the background, each shard's primary
	// first, then its replicas, for the shards being read (a shard not
	// read since its last round is polled again when a read asks for it).
	// A replica takes reads only while its last round, begun at most
	// ReadinessInterval + 500 ms earlier, found it caught up with where
	// its primary was at the round's start (see readiness.go for the exact
	// bound). Default 1 s.
	ReadinessInterval time.Duration
	// MaxReplicaLag is how far, in bytes of replication stream, a replica
	// may be short of its primary's offset, polled just before it in the
	// same round, and still take reads. Default 0: a replica must have
	// applied everything its primary had (it is asked again for up to
	// 20 ms, which in steady state it always makes). A larger value lets
	// a replica serve values up to that many bytes of writes older.
	MaxReplicaLag int64

	// TopologyInterval is how often the slot map (CLUSTER SLOTS) is
	// refreshed while the Cluster may be changing: while a node is
	// ejected, and for a minute after a MOVED, ASK, TRYAGAIN or
	// CLUSTERDOWN reply, a lost node connection or a poll that found a
	// node in another role than the map's (each of which also refreshes
	// it at once). Default 1 s.
	TopologyInterval time.Duration
	// SteadyTopologyInterval is how often the slot map is refreshed
	// otherwise (at least TopologyInterval), and rueidis's own map, which
	// rueidis also refreshes on its redirects and lost connections. A
	// refresh per process and interval, from every process of a fleet,
	// is what a node pays for this. Default 30 s.
	SteadyTopologyInterval time.Duration

	// PrimaryAfterWrite sends the reads of a hash slot to its primary for
	// this long after this Tier wrote to that slot, so that a process
	// reads its own writes although replication is asynchronous. Negative
	// turns it off. Default 1 s.
	PrimaryAfterWrite time.Duration

	// HotCopies is how many copies of a hot key are kept, the key itself
	// included, each on a different primary (so at most one per primary):
	// the Cache reads hot keys from one copy at random and writes all of
	// them (smear.go; the Cache decides which keys are hot, Policy.Hot).
	// 1 turns smearing off. Default 5, the copy count a production
	// hot-key smearing scheme used.
	HotCopies int
	// HotCopyTTL is how long a copy lives when it is filled from its key
	// after a read found the copy missing (a key that turned hot after it
	// was written). Copies written with a loaded value take its TTL. Default
	// 1 minute.
	HotCopyTTL time.Duration
}

// Defaults of ClusterOptions.
const (
	DefaultNodeConsecutiveFailures = 3
	DefaultNodeFailureRate         = 0.5
	DefaultNodeMinRequests         = 20
	DefaultNodeWindow              = 10 * time.Second
	DefaultProbeInterval           = 250 * time.Millisecond
	DefaultMaxProbeInterval        = time.Second
	DefaultProbeTimeout            = 100 * time.Millisecond
	DefaultMaxEjectedShare         = 0.5
	DefaultSilentConnTimeout       = time.Second
	DefaultReadinessInterval       = time.Second
	DefaultMaxReplicaLag           = 0
	DefaultTopologyInterval        = time.Second
	DefaultSteadyTopologyInterval  = 30 * time.Second
	DefaultPrimaryAfterWrite       = time.Second
	DefaultHotCopies               = 5
	DefaultHotCopyTTL              = time.Minute
)

// withDefaults validates c and fills in the defaults.
func (c ClusterOptions) withDefaults() (ClusterOptions, error) {
	if c.ConsecutiveFailures < 0 || c.MinRequests < 0 || c.Window < 0 || c.ProbeInterval < 0 ||
		c.MaxProbeInterval < 0 || c.ProbeTimeout < 0 || c.SilentConnTimeout < 0 ||
		c.ReadinessInterval < 0 || c.MaxReplicaLag < 0 || c.TopologyInterval < 0 || c.SteadyTopologyInterval < 0 ||
		c.HotCopies < 0 || c.HotCopyTTL < 0 {
		return c, errors.New("redis tier: negative Cluster option")
	}
	if c.FailureRate < 0 || c.FailureRate > 1 || c.MaxEjectedShare < 0 || c.MaxEjectedShare > 1 {
		return c, errors.New("redis tier: Cluster FailureRate and MaxEjectedShare must be in [0, 1]")
	}
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = DefaultNodeConsecutiveFailures
	}
	if c.FailureRate == 0 {
		c.FailureRate = DefaultNodeFailureRate
	}
	if c.MinRequests == 0 {
		c.MinRequests = DefaultNodeMinRequests
	}
	if c.MaxEjectedShare == 0 {
		c.MaxEjectedShare = DefaultMaxEjectedShare
	}
	if c.MaxReplicaLag == 0 {
		c.MaxReplicaLag = DefaultMaxReplicaLag
	}
	if c.HotCopies == 0 {
		c.HotCopies = DefaultHotCopies
	}
	set(&c.Window, DefaultNodeWindow)
	set(&c.ProbeInterval, DefaultProbeInterval)
	set(&c.MaxProbeInterval, max(DefaultMaxProbeInterval, c.ProbeInterval))
	set(&c.ProbeTimeout, DefaultProbeTimeout)
	set(&c.SilentConnTimeout, DefaultSilentConnTimeout)
	set(&c.ReadinessInterval, DefaultReadinessInterval)
	set(&c.TopologyInterval, DefaultTopologyInterval)
	set(&c.SteadyTopologyInterval, DefaultSteadyTopologyInterval)
	c.SteadyTopologyInterval = max(c.SteadyTopologyInterval, c.TopologyInterval)
	set(&c.PrimaryAfterWrite, DefaultPrimaryAfterWrite)
	set(&c.HotCopyTTL, DefaultHotCopyTTL)
	if c.MaxProbeInterval < c.ProbeInterval {
		return c, fmt.Errorf("redis tier: Cluster MaxProbeInterval %v < ProbeInterval %v", c.MaxProbeInterval, c.ProbeInterval)
	}
	if c.Window < 10 {
		return c, fmt.Errorf("redis tier: Cluster Window %v too short", c.Window)
	}
	return c, nil
}

// systemClock is the default Clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// StreamOptions configures the invalidation stream: every Invalidate
// publishes its keys on Channel, and every process listening hears them
// and drops its in-memory copies. The zero value means the defaults.
type StreamOptions struct {
	// Channel is the pub/sub channel of the announcements. Every process
	// sharing a key space must use the same one. Default KeyPrefix +
	// "holdfast:invalidations".
	Channel string
	// Heartbeat is how often a listening process publishes a heartbeat on
	// a channel of its own, to know that the stream delivers: one overdue
	// by five intervals is reported as a possible loss, and the process
	// subscribes again elsewhere. In a Cluster each heartbeat crosses the
	// bus to every node. Default 1 s.
	Heartbeat time.Duration
	// PingInterval is how long the subscription may receive nothing
	// before it is sent a PING: silent for three intervals (a frozen node, a
	// dead connection), it counts as a loss too. Each PING costs the
	// subscribed node alone. Default 500 ms.
	PingInterval time.Duration
}

// SentinelOptions configures the Sentinel shape: a primary with replicas,
// monitored by Redis Sentinel, which promotes a replica when the primary
// fails. The zero value means no Sentinel.
type SentinelOptions struct {
	// Addrs are the sentinels' "host:port" addresses, all of them: the
	// tier asks them in turn which node is the primary and listens to
	// each for failovers (it does not learn of sentinels not listed).
	// Setting it selects the Sentinel shape.
	Addrs []string
	// MasterName is the name the sentinels monitor the primary under
	// ("sentinel monitor <name> ..."). Required with Addrs.
	MasterName string
	// Username and Password authenticate with the sentinels (their own
	// requirepass or ACL user, not the data nodes'). Default: no AUTH.
	Username string
	Password string
	// TLS, when non-nil, connects to the sentinels with TLS. Default:
	// plain TCP.
	TLS *tls.Config
	// RefreshInterval is how often the tier asks the primary for its
	// ROLE, and, when it does not answer as a master, the sentinels which
	// node is the primary. The tier also moves at once on the first
	// +switch-master announcement of any sentinel (it subscribes on each:
	// one connection per sentinel) and on a write answered READONLY; the
	// check bounds what neither shows, an announcement missed by every
	// subscription or a demoted primary that only reads meet. Each check
	// costs the primary one ROLE. Default 1 s.
	RefreshInterval time.Duration
}

// DefaultSentinelRefresh is SentinelOptions.RefreshInterval's default.
const DefaultSentinelRefresh = time.Second

// sentinel reports whether o selects the Sentinel shape.
func (o Options) sentinel() bool { return len(o.Sentinel.Addrs) > 0 }

// checkSentinel validates the Sentinel options against the shape they
// select, with an error that says which options contradict each other.
func (o *Options) checkSentinel() error {
	s := &o.Sentinel
	if !o.sentinel() {
		if s.MasterName != "" || s.Username != "" || s.Password != "" || s.TLS != nil || s.RefreshInterval != 0 {
			return errors.New("redis tier: Sentinel options set without Sentinel.Addrs (the sentinels' addresses)")
		}
		return nil
	}
	if len(o.Addrs) > 0 {
		return fmt.Errorf("redis tier: both Addrs %v and Sentinel.Addrs %v: with Sentinel the primary is found through the sentinels; leave Addrs empty", o.Addrs, s.Addrs)
	}
	if s.MasterName == "" {
		return errors.New("redis tier: Sentinel.Addrs without Sentinel.MasterName (the name the sentinels monitor the primary under)")
	}
	for _, a := range s.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("redis tier: sentinel address %q: %w", a, err)
		}
	}
	if s.RefreshInterval < 0 {
		return errors.New("redis tier: negative Sentinel.RefreshInterval")
	}
	if s.RefreshInterval == 0 {
		s.RefreshInterval = DefaultSentinelRefresh
	}
	s.Addrs = append([]string(nil), s.Addrs...)
	return nil
}

// Defaults of Options.
const (
	DefaultReadBudget     = 50 * time.Millisecond
	DefaultWriteTimeout   = 100 * time.Millisecond
	DefaultDialTimeout    = time.Second
	DefaultPingTimeout    = time.Second
	DefaultMaxKeyBytes    = 1 << 10
	DefaultMaxStoredBytes = 1<<20 + tier.HeaderSize
	DefaultHeartbeat      = time.Second
	DefaultStreamPing     = 500 * time.Millisecond
)

// withDefaults validates o and returns a copy with the defaults filled in.
func (o Options) withDefaults() (_ Options, _ breaker.Settings, err error) {
	if err := o.checkSentinel(); err != nil {
		return o, breaker.Settings{}, err
	}
	if len(o.Addrs) == 0 && !o.sentinel() {
		return o, breaker.Settings{}, errors.New("redis tier: no Addrs (nor Sentinel.Addrs)")
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return o, breaker.Settings{}, fmt.Errorf("redis tier: address %q: %w", a, err)
		}
	}
	o.Addrs = append([]string(nil), o.Addrs...)
	if o.ReadBudget < 0 || o.WriteTimeout < 0 || o.DialTimeout < 0 || o.PingTimeout < 0 ||
		o.MaxKeyBytes < 0 || o.MaxStoredBytes < 0 {
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
	if o.PingTimeout == 0 {
		o.PingTimeout = DefaultPingTimeout
	}
	if o.MaxKeyBytes == 0 {
		o.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if o.MaxStoredBytes == 0 {
		o.MaxStoredBytes = DefaultMaxStoredBytes
	}
	if len(o.KeyPrefix) >= o.MaxKeyBytes {
		return o, breaker.Settings{}, fmt.Errorf("redis tier: KeyPrefix is %d bytes, MaxKeyBytes %d", len(o.KeyPrefix), o.MaxKeyBytes)
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		// A hash tag in the prefix would put every key in one Cluster slot.
		return o, breaker.Settings{}, fmt.Errorf("redis tier: KeyPrefix %q contains a hash tag brace", o.KeyPrefix)
	}
	if o.Stream.Heartbeat < 0 || o.Stream.PingInterval < 0 {
		return o, breaker.Settings{}, errors.New("redis tier: negative Stream.Heartbeat or Stream.PingInterval")
	}
	if o.Stream.Heartbeat == 0 {
		o.Stream.Heartbeat = DefaultHeartbeat
	}
	if o.Stream.PingInterval == 0 {
		o.Stream.PingInterval = DefaultStreamPing
	}
	if o.Stream.Channel == "" {
		o.Stream.Channel = o.KeyPrefix + "holdfast:invalidations"
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Cluster, err = o.Cluster.withDefaults(); err != nil {
		return o, breaker.Settings{}, err
	}
	return o, o.Breaker, nil
}
