// Package tier is what a shared tier implements for holdfast, as
// database/sql/driver is what a database driver implements for database/sql:
// the Tier interface and its optional capabilities (Coordinator, Refiller,
// Smearer, HotSharer, InvalidationStream, HealthReporter), the types they
// exchange, and the envelope every tier stores.
// An application uses package holdfast and passes a tier (package redis, or
// inmem for tests) as holdfast.Options.Shared; it never needs this package.
//
// The Cache probes a tier's optional interfaces once, at holdfast.New, also
// through a wrapping tier's Unwrap() Tier method, and refuses a policy that
// needs a capability the tier lacks.
package tier

import (
	"context"
	"errors"
	"time"
)

// Tier is a shared cache tier: a store that several processes read and write,
// such as Redis. It holds opaque bytes (encoded envelopes, see Entry) under
// keys that the Cache has already qualified with the namespace, so a Tier never
// needs to know about namespaces, codecs or expiry policy.
//
// A Tier reports three outcomes, never two: a hit (found == true), a miss
// (found == false, err == nil) and a failure (err != nil). A miss is a normal
// answer and must never be reported as an error; the read path and the
// breakers depend on telling them apart (a Hit/Miss wrapper with
// exceptions reserved for Redis failures).
//
// A Tier that skips the call because it already knows it would fail (an open
// breaker, an ejected node) returns an error matching ErrBypassed, so that the
// Cache counts it as a bypass rather than a failure.
//
// Implementations must be safe for concurrent use, must honour ctx deadlines
// (the Cache bounds every read by its read budget through ctx), and must not
// keep references to the byte slices they are given after returning.
type Tier interface {
	// Get reads one key.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	// GetMany reads many keys at once. The returned slice has one Lookup per
	// key, in order. A non-nil error means the whole call failed; a failure
	// of some keys only is reported per key in Lookup.Err.
	GetMany(ctx context.Context, keys []string) ([]Lookup, error)
	// Set writes values with a time to live. The tier should keep the value
	// at least until ttl has passed, and may drop it earlier under memory
	// pressure.
	Set(ctx context.Context, items ...Item) error
	// Delete removes keys. Deleting a missing key is not an error.
	Delete(ctx context.Context, keys ...string) error
	// Close releases the tier's connections and stops its goroutines.
	Close() error
}

// Lookup is the outcome of reading one key in Tier.GetMany.
type Lookup struct {
	Value []byte
	Found bool
	Err   error
}

// Item is one key to write to a Tier.
type Item struct {
	Key   string
	Value []byte
	TTL   time.Duration
}

// Coordinator is implemented by shared tiers that let processes coordinate
// through them. The Cache uses it when the shared tier has it:
//
//   - Versioned writes guard against the stale set: a process reads a key's
//     version before it reads the source, and its write is refused if the
//     key was invalidated (its version bumped) since, by any process. So a
//     value read from the database before an invalidation never lands in the
//     shared tier after it. (Facebook's memcache leases, NSDI 2013, solve the
//     same race with tokens.)
//   - Leases coalesce loads across processes, per key (holdfast.Policy.Lease).
type Coordinator interface {
	Tier
	// Version returns key's invalidation version: 0 until the key is first
	// invalidated (or after its version has expired), then 1, 2, ...
	Version(ctx context.Context, key string) (uint64, error)
	// SetIfVersion writes item only if its key's version is still version,
	// atomically, and reports whether it did.
	SetIfVersion(ctx context.Context, item Item, version uint64) (bool, error)
	// Invalidate deletes keys and bumps their versions, atomically per key.
	Invalidate(ctx context.Context, keys ...string) error
	// Lease takes key's lease with token for ttl if no one holds it, and
	// reports whether it did. A lease expires by itself after ttl.
	Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error)
	// Release gives the lease up if token still holds it.
	Release(ctx context.Context, key, token string) error
}

// VersionedGetter is implemented by Coordinators that can read a key's
// version in the same round trip as its value. The Cache reads a key this
// way when its lookup is a single Get, so that a miss, which loads, needs
// no Version call of its own before the load: on a Redis Cluster that call
// was a third of a miss's round trips.
type VersionedGetter interface {
	Coordinator
	// GetVersioned is Get that also reads key's version, as Version would
	// have at the instant of the read, on the node whose version
	// SetIfVersion checks. When it could not (the value came from a
	// replica, say), Versioned is false and the Cache calls Version before
	// it loads, as it does without this interface.
	GetVersioned(ctx context.Context, key string) VersionedLookup
}

// VersionedLookup is GetVersioned's answer: the Lookup, and key's version
// when Versioned.
type VersionedLookup struct {
	Lookup
	Version   uint64
	Versioned bool
}

// Refiller is implemented by coordinating tiers that can take back a value
// a process holds in memory when the tier has lost it (a node restarted
// empty, a replica promoted without the latest writes, an eviction), so
// that the process does not load it from the source again. The Cache calls
// Refill on a miss of a key whose copy in its memory no invalidation can
// have passed unheard (holdfast's doc/across-processes.md says which).
//
// A tier that lost a key's value has lost its version too, so the version
// a copy was loaded under proves nothing there. Refill writes only where
// the tier holds neither: no value of the key (any process's load or
// write-back is kept, and only one write-back of a key lands) and no
// version (no invalidation of the key the tier remembers, the one made
// after a restart included). The check and the write are atomic, so an
// invalidation that reaches the tier before the write refuses it, and one
// after deletes it.
type Refiller interface {
	Coordinator
	// Refill writes item if the tier holds neither a value nor a version
	// for its key, atomically, and reports whether it did. When it did not
	// because the key holds a value, held is that value; when it did not
	// because the key has a version (it was invalidated), held is nil.
	Refill(ctx context.Context, item Item) (written bool, held []byte, err error)
}

// OverRefiller is implemented by Refillers that can also write a copy back
// over an older load of its key that the tier still holds past its hard
// time: a write of the newer load failed (it was loaded while the tier was
// down), and the tier kept the older one for stale-if-error, which no read
// serves as current. The Cache calls RefillOver on such a hit as it calls
// Refill on a miss.
type OverRefiller interface {
	Refiller
	// RefillOver is Refill, except that it also writes where the key holds
	// exactly over (the bytes the Cache read); when the key holds any
	// other value, held is that value.
	RefillOver(ctx context.Context, item Item, over []byte) (written bool, held []byte, err error)
}

// Smearer is implemented by shared tiers that can spread a hot key's reads
// over several nodes by keeping copies of it (in Redis Cluster a
// key lives on one node, and one viral product saturates that node). The
// Cache uses the smeared calls for the keys its detector reports hot
// (holdfast.Policy.Hot) and the plain ones for every other key.
//
// The copies are guarded like the key itself: a copy is written only if no
// invalidation of the key has begun since version was read, and Invalidate
// removes every copy of every key it is given, whether or not this process
// thinks the key hot, because another process may have smeared it, or this
// one may have while it was hot. So an invalidation never leaves an old copy
// readable, demoted keys included.
type Smearer interface {
	Coordinator
	// Copies is how many copies of a hot key the tier keeps now, the key
	// itself included; 1 while it does not smear (a single server, say),
	// and the Cache then does not ask it to.
	Copies() int
	// GetSmeared reads key from one of its copies, chosen at random; a copy
	// that misses or fails is answered by key itself.
	GetSmeared(ctx context.Context, key string) (value []byte, found bool, err error)
	// SetSmearedIfVersion writes item to its key and to each of the key's
	// copies, in one pipeline, each only if the key's version is still
	// version. It reports whether the key itself was written.
	SetSmearedIfVersion(ctx context.Context, item Item, version uint64) (bool, error)
}

// ErrBypassed is returned by a Tier that skipped a call because it knows the
// call would fail (an open breaker, an ejected node). The Cache counts it as
// a bypass, not as a tier error.
var ErrBypassed = errors.New("holdfast: tier bypassed")

// HotSharer is implemented by shared tiers through which processes share
// the keys they find hot (holdfast.Policy.Hot.Share), so that every instance keeps
// the same keys in memory and smears the same ones, including instances
// that have not seen enough reads of a key yet (a new instance, or one the
// load balancer sends less traffic). The Cache calls it once per
// holdfast.Options.HotShareInterval per sharing namespace: a low, bounded rate.
type HotSharer interface {
	// ShareHot publishes keys as hot in set for ttl, and returns the keys
	// any process published in set that are still current, at most limit,
	// the most recently published first. The tier bounds the set's size.
	ShareHot(ctx context.Context, set string, keys []string, ttl time.Duration, limit int) ([]string, error)
}

// InvalidationStream is implemented by coordinating tiers that announce every
// invalidation to every process, so that each can drop its in-memory copy of
// the key (holdfast's hot tier) within milliseconds rather than when the copy
// expires. Invalidate announces each key it invalidates; Listen delivers the
// announcements of every process, this one's included.
//
// Announcements may be lost (a broken connection, a frozen server): the
// stream then says so with Lost, and with Heard once it is known to deliver
// again, and the Cache revalidates what it holds from before. A stream must
// never stay silent about a loss for longer than it takes to notice one.
type InvalidationStream interface {
	Coordinator
	// Listen delivers the stream's events to l, one at a time on the calling
	// goroutine, reconnecting as needed, until ctx ends.
	Listen(ctx context.Context, l Listener)
}

// Listener receives an InvalidationStream's events. Its methods must be
// fast: the stream does not read on while one runs.
type Listener interface {
	// Invalidated: key (as given to Invalidate) was invalidated at at, by the
	// clock of the process that did it, on behalf of origin (the Origin of
	// the Invalidate call's context; "" when it had none).
	Invalidated(key string, at time.Time, origin string)
	// Heard: the stream has just been seen to deliver (its own heartbeat
	// made the round trip), so every announcement made before that
	// heartbeat was sent has been delivered, unless Lost was called since.
	Heard()
	// Lost: announcements may have been lost since the last Heard (the
	// connection broke, or a heartbeat is overdue).
	Lost()
}

type originKey struct{}

// WithOrigin returns ctx carrying origin, the identity of the process (the
// Cache) on whose behalf a call is made: an InvalidationStream announces an
// invalidation with its call's Origin, so that its maker can tell its own
// announcements from others'.
func WithOrigin(ctx context.Context, origin string) context.Context {
	return context.WithValue(ctx, originKey{}, origin)
}

// Origin returns the origin WithOrigin put in ctx, or "".
func Origin(ctx context.Context) string {
	s, _ := ctx.Value(originKey{}).(string)
	return s
}

type nodeReportKey struct{}

// WithNodeReport returns ctx carrying report, which a tier that knows which
// of its nodes answers a read calls with the node's address (ReportNode):
// traces name the node.
func WithNodeReport(ctx context.Context, report func(addr string)) context.Context {
	return context.WithValue(ctx, nodeReportKey{}, report)
}

// ReportNode tells ctx's node report, if any, that addr answered.
func ReportNode(ctx context.Context, addr string) {
	if f, ok := ctx.Value(nodeReportKey{}).(func(string)); ok {
		f(addr)
	}
}

// Node is one node of a shared tier and its health, as a tier with nodes
// reports it (package redis, Tier.NodeStats, converted by the caller), for
// the exporters (holdfastprom, holdfastotel), which do not import the tier.
type Node struct {
	Addr      string
	Primary   bool
	State     string // "ready", "not_ready" or "ejected"
	Requests  uint64 // commands sent
	Failures  uint64 // commands that failed, timeouts included
	Timeouts  uint64 // commands past their budget
	Reads     uint64 // keys answered
	ReadShare float64
	Ejections uint64
}

// Breaker is a shared tier's circuit breaker as the tier reports it, for
// the exporters.
type Breaker struct {
	State       string // "closed", "open" or "half_open"
	Opens       uint64 // times it opened
	Transitions uint64 // state changes
}

// HealthReporter is implemented by shared tiers that can say whether they
// are serving calls, as the code that talks to the store sees it. The Cache
// asks it a few times a second to log an outage and its end
// (holdfast.Options.Logger), and the exporters ask it at each collection,
// so that neither works health out from counters. Health must be cheap and
// must not block on the network.
type HealthReporter interface {
	Health() Health
}

// Health is a shared tier's health at one moment.
type Health struct {
	// Connected is false until a tier that connects in the background
	// first connects; true for a tier connected when it was made.
	Connected bool
	// Down: the tier skips or fails its calls: its breaker is not closed,
	// or it has not connected and an attempt to has failed. A tier still
	// making its first attempt is neither Connected nor Down.
	Down bool
	// Reason says why, while Down: ReasonUnreachable, ReasonTimeout or
	// ReasonAuthRefused.
	Reason string
	// Breaker is the tier's breaker; "open" while it has not connected,
	// as every call is skipped then.
	Breaker Breaker
	// Nodes is the health of each node of a tier with per-node health (a
	// Redis Cluster); nil for others, and until connected.
	Nodes []Node
}

// The reasons of a Health that is Down.
const (
	// ReasonUnreachable: connections are refused or broken (the server is
	// not running, or not reachable).
	ReasonUnreachable = "unreachable"
	// ReasonTimeout: calls are sent and not answered in time (the server
	// is frozen, or the network drops packets).
	ReasonTimeout = "timeout"
	// ReasonAuthRefused: the server refuses the credentials, a command or
	// key (an ACL), or the TLS handshake; retrying does not help.
	ReasonAuthRefused = "auth_refused"
)
