package holdfast

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"time"

	"github.com/holdfast-dev/holdfast/observe"
	"github.com/holdfast-dev/holdfast/tier"
)

// Options configures a Cache. The zero value is valid: an in-process cache
// with the defaults given beside each field.
type Options struct {
	// Shared is the shared tier (Redis, say). Default nil: in-process tiers
	// only. The Cache does not close it; its owner does.
	Shared tier.Tier

	// MaxConcurrentLoads caps loader calls running at once in this process,
	// across namespaces: the database connections this process may spend on
	// cache misses (a per-pod limit of 1 in front of MySQL is where this
	// design comes from). A load that finds no slot waits up to LoadWait,
	// then is rejected: the caller gets a stale value if one may be served,
	// else ErrOverloaded. Default 4 × GOMAXPROCS; a negative value turns
	// the cap off.
	MaxConcurrentLoads int

	// LoadWait is how long a load may wait for a free slot before it is
	// rejected. Default 250 ms: a burst of a few dozen cold keys (a deploy,
	// a mass invalidation) waits its turn rather than fail. Once no slot
	// has come free to waiting loads for LoadWait, the source is saturated
	// rather than bursting, and a load waits at most 10 ms: a queue in
	// front of a database that cannot keep up only delays the answer "no".
	// A negative value rejects at once, with no queue at all. Loads whose readers
	// can be served a stale value, and background refreshes, never wait.
	LoadWait time.Duration

	// Clock tells the time. Default: the system clock, read every
	// millisecond into a word that hits read. Tests inject a fake.
	Clock Clock

	// Tracer traces the reads that leave the hot tier, stage by stage
	// (package holdfastotel: OpenTelemetry spans). Default nil: none. Load
	// latencies go to the Recorders an exporter adds with
	// Cache.SetRecorder; the counters in Stats are always kept.
	Tracer observe.Tracer

	// MaxPendingInvalidations bounds, per namespace, the invalidations kept
	// for replay because the shared tier's delete failed or was skipped.
	// Beyond it an invalidation is dropped from the queue (the local copies
	// still go), counted and logged. Default 100,000. Each holds its key and
	// up to 60 bytes of map (measured on maps of 1,000 to 120,000 keys), so a
	// full queue of 64-byte keys takes about 12 MiB.
	MaxPendingInvalidations int

	// ReplayInterval is how often pending invalidations are retried.
	// Default 500 ms.
	ReplayInterval time.Duration

	// HotShareInterval is how often namespaces with Hot.Share exchange
	// their hot keys through the shared tier (a tier.HotSharer): one call per
	// namespace per interval. Default 5 s.
	HotShareInterval time.Duration

	// Logger receives rare events: loader panics, replayed invalidations,
	// the shared tier going down (a warning with its reason: unreachable,
	// timeout, auth_refused) and coming back (with how long it was down),
	// at most one down line per 30 s.
	// Default: slog.Default().
	Logger *slog.Logger
}

// Policy configures one namespace. The zero value is valid and gives the
// defaults beside each field.
type Policy struct {
	// TTL is the hard time to live: how long after its origin a value may be
	// served as current. Default 1 minute.
	TTL time.Duration

	// SoftTTL is how long after its origin a value is fresh. Between SoftTTL
	// and TTL a read returns the value at once and one background refresh per
	// key per process runs (stale-while-revalidate). Default: equal to TTL,
	// that is no stale-while-revalidate window.
	SoftTTL time.Duration

	// EarlyRefresh spreads refreshes before the soft time so that processes
	// holding the same value do not all refresh it at once. Default: none.
	EarlyRefresh EarlyRefresh

	// StaleIfError is how long past its hard time a value may still be served
	// when fresh data cannot be had: the shared tier failed and the loader
	// failed, timed out or was rejected. Counted from the value's origin
	// time plus TTL. Default 0: never (typical windows: product info 30
	// min, list 10 min, stock 5 s).
	StaleIfError time.Duration

	// SlowLoadGrace is how long a reader waits for a load when it holds a
	// value past its hard time but within its stale-if-error window (in
	// last-known-good, or the shared tier's past-hard copy): past it the
	// reader gets that value (ReasonSourceSlow) while the load goes
	// on and stores its result as usual. A slow source is no error, so
	// without it a source that slows from 10 ms to 400 ms makes every such
	// reader wait 400 ms although a value it may serve is in hand (Varnish's
	// grace, RFC 5861's stale-if-error). Each reader of a flight waits at
	// most this long from when it began waiting. It applies only where
	// StaleIfError (or a loader's own window) would serve the value had the
	// load failed; between soft and hard time stale-while-revalidate
	// answers at once anyway. Default 15 ms: half again a database that
	// answers in about 10 ms, so a healthy load still answers its readers
	// with the fresh value, and a reader of a struggling one waits no
	// longer than a couple of such loads (off when LoadTimeout is 15 ms or
	// less: the timeout bounds the wait then). Must be shorter than
	// LoadTimeout; a negative value turns it off (readers wait for the
	// load, up to LoadTimeout). While the shared tier is failing (an error
	// or a bypass within the last second) the wait is no longer than the
	// slow-read delay (SlowReadGrace, unless that is off): every process's
	// reads then reach the source at once, and a value in hand answers as
	// it would a slow shared read.
	SlowLoadGrace time.Duration

	// SlowReadGrace is the floor of the slow-read delay: how long a reader
	// waits for the shared tier when this process's last-known-good store
	// holds a value it may serve (within its hard time, or within its
	// stale-if-error window while the tier is failing). Past the delay the
	// reader gets that value (SourceMemory, ReasonTierSlow) while the read
	// goes on and its answer still reaches the breaker and the stores. The
	// delay is four times the tier's recent latency (a moving average of
	// the single-key reads that succeeded), never less than SlowReadGrace,
	// so a frozen tier costs such a reader a few milliseconds instead of
	// the read budget. A read with no such value skips a tier that has
	// answered none of the reads waiting on it for four delays, and loads,
	// as past an open breaker (counted in shared.bypassed). Default 2 ms:
	// several round trips of a Redis on the same network, so a healthy
	// tier's jitter rarely reaches it (the lab's no-fault runs). A negative
	// value turns it off.
	SlowReadGrace time.Duration

	// LoadErrorBackoff is how long after a failed load of a key its
	// loader is not called again: meanwhile its reads get a stale value
	// when one may be served, else that load's error, at once. Each
	// further failure in a row doubles the wait, up to 30 s or the TTL,
	// whichever is shorter (never below LoadErrorBackoff itself); each
	// wait is shortened by up to a quarter at random, so that keys and
	// processes that failed together retry apart; a load that succeeds
	// (or finds the key missing) starts it over, and so does an
	// invalidation of the key, heard or made here: the source has a new
	// value to load. So a source that is down
	// for minutes gets about two calls per key per minute from each
	// process, not one per read, and a key is loaded again at most 30 s
	// after its source recovers. Default 1 s; a negative value turns it
	// off: every read with nothing stale to serve calls the loader.
	LoadErrorBackoff time.Duration

	// NegativeTTL is how long a loader's ErrNotFound is remembered. Default 5
	// seconds. Negative entries are never served stale. A negative value
	// turns negative caching off: ErrNotFound is returned to the load's
	// readers and not stored, so the next read calls the loader again
	// (this process's copies of an earlier value are dropped; the shared
	// tier's expire at their TTL).
	NegativeTTL time.Duration

	// LoadTimeout bounds one load, whatever its callers' contexts: the load
	// runs on a context detached from any one caller so that a caller who
	// leaves does not cancel it for the others. Default 5 seconds.
	LoadTimeout time.Duration

	// MaxConcurrentLoads caps this namespace's loads in addition to the
	// cache-wide cap. Default 0: only the cache-wide cap applies.
	MaxConcurrentLoads int

	// ReservedLoads is load slots of this namespace's own, taken before
	// the cache-wide ones (Options.MaxConcurrentLoads), so that a flood
	// of misses in another namespace (unique search prefixes, say) cannot
	// take every slot and leave this one's readers with ErrOverloaded. The
	// process then runs at most Options.MaxConcurrentLoads plus every
	// namespace's ReservedLoads loads at once. Within MaxConcurrentLoads
	// when that is set. Default 0: none.
	ReservedLoads int

	// Lease coalesces this namespace's loads across processes through the
	// shared tier, when it is a tier.Coordinator.
	Lease LeasePolicy

	// Hot configures this namespace's in-process hot tier.
	Hot HotPolicy

	// UnguardedWrites accepts a shared tier that is not a tier.Coordinator:
	// loads then write without the stale-set guard, so a value read from
	// the source before an invalidation may be stored after it, until its
	// TTL. Default false: such a tier is an error from Cache.Namespace.
	UnguardedWrites bool

	// LastKnownGoodBytes bounds the in-process store of last good values:
	// what answers while the shared tier fails (within each value's hard
	// time), and what stale-if-error serves from. Default 32 MiB with a
	// shared tier, with StaleIfError, or with SoftTTL < TTL (the store then
	// also holds values between soft and hard); else no store. Values are
	// kept as encoded bytes.
	//
	// The bound is on the memory entries take, not on their payload: an
	// entry is charged its key and its envelope (the value and a 40-byte
	// header, 48 with a stale-if-error window of its own) as the Go
	// allocator rounds them, plus 232 bytes of node, index and frequency
	// sketch. So 32 MiB holds about 107,500 16-byte values under 12-byte
	// keys, 40,700 of 512 bytes, 1,790 of 16 KiB (18 KiB each as
	// allocated). An entry also in the hot tier shares its key and envelope
	// with it, and both count them: the two budgets together bound the
	// namespace's stores from above.
	LastKnownGoodBytes int64

	// MaxValueBytes refuses loaded values larger than this with ErrTooLarge;
	// they are returned to the callers but not cached. Default 1 MiB.
	MaxValueBytes int

	// MaxKeyBytes refuses keys longer than this with ErrTooLarge. Default
	// 512 bytes.
	MaxKeyBytes int

	// Lifetime bounds the lifetimes loaders set for their values
	// (SetLifetime). Default: from 1 s to TTL, with a stale-if-error window
	// up to StaleIfError.
	Lifetime LifetimeBounds
}

// HotPolicy configures a namespace's hot tier: a small in-process tier of
// encoded bytes (a local cache of hot keys took ~35% of normal traffic, up to 70% in spikes, in a large deployment).
type HotPolicy struct {
	// TTL is how long a value stays in the hot tier; it is never kept past
	// the value's soft time. Default 1 minute.
	TTL time.Duration
	// MaxBytes bounds the memory the tier's entries take, counted as for
	// Policy.LastKnownGoodBytes. Default 16 MiB; a negative value turns the
	// hot tier off for this namespace.
	MaxBytes int64
	// Threshold is the read rate, per second and key, at or above which a
	// key is hot, found as it is read: when positive, only hot keys enter
	// the hot tier (a local cache of hot keys took ~35% of normal traffic,
	// up to 70% in spikes). By default every key read enters it, and the
	// tier's own eviction keeps the most read within MaxBytes, wherever no
	// other process can change a value unseen: without a shared tier, and
	// with one whose invalidation stream (tier.InvalidationStream, as the
	// Redis tier's) drops every copy of an updated key. With a shared tier
	// without a stream the default is 1000/60, 1,000 reads a minute, since
	// a hot copy there is bounded only by TTL. A negative value admits
	// every key read in any case. With a shared tier that smears
	// (tier.Smearer), the keys found hot, at this rate or the default
	// 1000/60, are also read from and written to several nodes.
	Threshold float64
	// HalfLife is how fast the detector forgets old reads: a key read at a
	// steady rate r is estimated at r·(1 − 2^(−t/HalfLife)) after t, and one
	// no longer read drops below Threshold after HalfLife·log2(r/Threshold).
	// So a key read at 3.4 × Threshold or more is promoted within one
	// half-life. Default 2 s.
	HalfLife time.Duration
	// TopK bounds how many hot keys the detector reports. Default 64.
	TopK int
	// Admit, when set, must also accept a key for it to enter the hot tier.
	// Default nil.
	Admit func(key string) bool
	// Share exchanges this namespace's hot keys with the other processes
	// through the shared tier, when it is a tier.HotSharer (package redis):
	// each process then treats the keys any of them found hot as hot,
	// for three HotShareIntervals after they were last published.
	// Default false.
	Share bool
	// NoWarmStart turns off the warm start of a namespace with Share: at
	// Cache.Namespace, the values of the keys the other processes find hot
	// are read from the shared tier into the hot tier (at most half of
	// MaxBytes, within 5 s), so that a process started while others run
	// does not start cold. Default false.
	NoWarmStart bool
	// MaxUnheard is how long the hot tier goes on answering after the
	// shared tier's invalidation stream (tier.InvalidationStream) was last
	// heard, when it breaks: past it the hot tier is emptied, and admits
	// nothing until the stream is heard again, when what it holds is
	// checked against the shared tier. It bounds how long another
	// process's update can go unseen here while the stream is down
	// (last-known-good still answers within the TTL while the shared tier
	// fails). Default 15 s.
	MaxUnheard time.Duration
}

// LeasePolicy configures per-key leases: on a shared-tier miss, a process
// takes the key's lease before loading; the others wait for the value
// instead of loading too (Spring's locking cache writer coalesced across
// JVMs but with one lock per cache name and no TTL; these are per key and
// expire by themselves). Leases never delay hits or other keys, and are
// skipped while the shared tier fails.
type LeasePolicy struct {
	// Enabled turns leases on. Default off.
	Enabled bool
	// TTL is how long a lease lasts if its holder never releases it (a
	// process killed mid-load, a release that could not reach the tier).
	// A waiting process waits at most TTL + LoadTimeout (the orphan's
	// lifetime, then one more holder's load) before it loads for itself.
	// A holder's load ends within LoadTimeout whatever its loader does, so
	// a longer lease would only stall its key. Default LoadTimeout.
	TTL time.Duration
	// Poll is how often a process waiting for another's load reads the
	// shared tier (and tries to take an expired lease). Default 10 ms.
	Poll time.Duration
}

// EarlyRefresh chooses how refreshes are spread before the soft time.
type EarlyRefresh struct {
	// Jitter moves each value's soft time earlier by a random fraction, up to
	// Jitter, of its fresh period (0 ≤ Jitter < 1). Chosen once when the
	// value is stored, so it costs nothing on reads.
	Jitter float64
	// XFetchBeta, when positive, refreshes a fresh value early with the
	// probability of XFetch (Vattani, Chierichetti, Lowenstein, VLDB 2015):
	// at each read, refresh when now − LoadCost·β·ln(rand) ≥ soft. β = 1 is
	// the paper's recommendation; larger refreshes earlier. Values that took
	// longer to load are refreshed earlier.
	XFetchBeta float64
}

// The defaults, documented beside each field: a zero field takes its
// default.
const (
	defaultLoadWait           = 250 * time.Millisecond
	defaultTTL                = time.Minute
	defaultNegativeTTL        = 5 * time.Second
	defaultLoadErrorBackoff   = time.Second
	defaultLoadTimeout        = 5 * time.Second
	defaultSlowLoadGrace      = 15 * time.Millisecond
	defaultSlowReadGrace      = 2 * time.Millisecond
	defaultHotTTL             = time.Minute
	defaultHotMaxBytes        = 16 << 20
	defaultHotThreshold       = 1000.0 / 60
	defaultHotHalfLife        = 2 * time.Second
	defaultHotTopK            = 64
	defaultHotMaxUnheard      = 15 * time.Second
	defaultLifetimeMin        = time.Second
	defaultLastKnownGoodBytes = 32 << 20
	defaultMaxValueBytes      = 1 << 20
	defaultMaxKeyBytes        = 512

	defaultMaxPendingInvalidations = 100_000
	defaultReplayInterval          = 500 * time.Millisecond
	defaultHotShareInterval        = 5 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	if o.MaxConcurrentLoads == 0 {
		o.MaxConcurrentLoads = 4 * runtime.GOMAXPROCS(0)
	}
	if o.LoadWait == 0 {
		o.LoadWait = defaultLoadWait
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxPendingInvalidations < 0 || o.ReplayInterval < 0 || o.HotShareInterval < 0 {
		return o, fmt.Errorf("holdfast: MaxPendingInvalidations %d, ReplayInterval %v or HotShareInterval %v is negative", o.MaxPendingInvalidations, o.ReplayInterval, o.HotShareInterval)
	}
	if o.HotShareInterval == 0 {
		o.HotShareInterval = defaultHotShareInterval
	}
	if o.MaxPendingInvalidations == 0 {
		o.MaxPendingInvalidations = defaultMaxPendingInvalidations
	}
	if o.ReplayInterval == 0 {
		o.ReplayInterval = defaultReplayInterval
	}
	return o, nil
}

func (p Policy) withDefaults() (Policy, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", p.TTL}, {"SoftTTL", p.SoftTTL}, {"StaleIfError", p.StaleIfError}, {"LoadTimeout", p.LoadTimeout}, {"Hot.TTL", p.Hot.TTL}, {"Hot.MaxUnheard", p.Hot.MaxUnheard}} {
		if d.v < 0 {
			bad("%s %v is negative", d.name, d.v)
		}
	}
	if p.TTL == 0 {
		p.TTL = defaultTTL
	}
	if p.SoftTTL == 0 {
		p.SoftTTL = p.TTL
	}
	if p.SoftTTL > p.TTL {
		bad("SoftTTL %v is longer than TTL %v", p.SoftTTL, p.TTL)
	}
	if p.Lifetime.Min < 0 || p.Lifetime.Max < 0 || p.Lifetime.MaxStaleIfError < 0 {
		bad("Lifetime.Min %v, Lifetime.Max %v or Lifetime.MaxStaleIfError %v is negative", p.Lifetime.Min, p.Lifetime.Max, p.Lifetime.MaxStaleIfError)
	}
	if p.Lifetime.MaxStaleIfError == 0 {
		p.Lifetime.MaxStaleIfError = p.StaleIfError
	}
	if p.Lifetime.Min == 0 {
		p.Lifetime.Min = min(defaultLifetimeMin, p.TTL)
	}
	if p.Lifetime.Max == 0 {
		p.Lifetime.Max = p.TTL
	}
	if p.Lifetime.Min > p.Lifetime.Max {
		bad("Lifetime.Min %v is longer than Lifetime.Max %v", p.Lifetime.Min, p.Lifetime.Max)
	}
	if p.LoadErrorBackoff == 0 {
		p.LoadErrorBackoff = defaultLoadErrorBackoff
	}
	if p.NegativeTTL == 0 {
		p.NegativeTTL = defaultNegativeTTL
	}
	if p.LoadTimeout == 0 {
		p.LoadTimeout = defaultLoadTimeout
	}
	switch {
	case p.SlowLoadGrace == 0 && p.LoadTimeout <= defaultSlowLoadGrace:
		// A LoadTimeout this short bounds the wait already, and
		// stale-if-error answers when it passes.
		p.SlowLoadGrace = -1
	case p.SlowLoadGrace == 0:
		p.SlowLoadGrace = defaultSlowLoadGrace
	case p.SlowLoadGrace >= p.LoadTimeout:
		// The load would time out first, and stale-if-error answer then.
		bad("SlowLoadGrace %v is not shorter than LoadTimeout %v (a negative value turns it off)", p.SlowLoadGrace, p.LoadTimeout)
	}
	if p.SlowReadGrace == 0 {
		p.SlowReadGrace = defaultSlowReadGrace
	}
	if j := p.EarlyRefresh.Jitter; j < 0 || j >= 1 || math.IsNaN(j) {
		bad("EarlyRefresh.Jitter %v is outside [0, 1)", j)
	}
	if b := p.EarlyRefresh.XFetchBeta; b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
		bad("EarlyRefresh.XFetchBeta %v is negative or not finite", b)
	}
	if p.MaxConcurrentLoads < 0 {
		bad("MaxConcurrentLoads %d is negative", p.MaxConcurrentLoads)
	}
	if p.ReservedLoads < 0 || (p.MaxConcurrentLoads > 0 && p.ReservedLoads > p.MaxConcurrentLoads) {
		bad("ReservedLoads %d is negative or over MaxConcurrentLoads %d", p.ReservedLoads, p.MaxConcurrentLoads)
	}
	if p.Lease.TTL < 0 || p.Lease.Poll < 0 {
		bad("Lease.TTL %v or Lease.Poll %v is negative", p.Lease.TTL, p.Lease.Poll)
	}
	if p.Lease.TTL == 0 {
		p.Lease.TTL = p.LoadTimeout
	}
	if p.Lease.Poll == 0 {
		p.Lease.Poll = 10 * time.Millisecond
	}
	if p.Hot.MaxUnheard == 0 {
		p.Hot.MaxUnheard = defaultHotMaxUnheard
	}
	if p.Hot.TTL == 0 {
		p.Hot.TTL = defaultHotTTL
	}
	if math.IsNaN(p.Hot.Threshold) || math.IsInf(p.Hot.Threshold, 0) || p.Hot.HalfLife < 0 || p.Hot.TopK < 0 {
		bad("Hot.Threshold %v is not finite, or Hot.HalfLife %v or Hot.TopK %d is negative", p.Hot.Threshold, p.Hot.HalfLife, p.Hot.TopK)
	}
	if p.Hot.Threshold < 0 {
		p.Hot.Threshold = -1
	}
	if p.Hot.HalfLife == 0 {
		p.Hot.HalfLife = defaultHotHalfLife
	}
	if p.Hot.TopK == 0 {
		p.Hot.TopK = defaultHotTopK
	}
	if p.Hot.MaxBytes < 0 {
		p.Hot.MaxBytes = -1
	}
	if p.Hot.MaxBytes == 0 {
		p.Hot.MaxBytes = defaultHotMaxBytes
	}
	if p.LastKnownGoodBytes < 0 {
		bad("LastKnownGoodBytes %d is negative", p.LastKnownGoodBytes)
	}
	if p.LastKnownGoodBytes == 0 && (p.StaleIfError > 0 || p.Lifetime.MaxStaleIfError > 0) {
		p.LastKnownGoodBytes = defaultLastKnownGoodBytes
	}
	if p.MaxValueBytes < 0 || p.MaxKeyBytes < 0 {
		bad("MaxValueBytes %d or MaxKeyBytes %d is negative", p.MaxValueBytes, p.MaxKeyBytes)
	}
	if p.MaxValueBytes == 0 {
		p.MaxValueBytes = defaultMaxValueBytes
	}
	if p.MaxKeyBytes == 0 {
		p.MaxKeyBytes = defaultMaxKeyBytes
	}
	if err := errors.Join(errs...); err != nil {
		return p, fmt.Errorf("holdfast: invalid policy: %w", err)
	}
	return p, nil
}
