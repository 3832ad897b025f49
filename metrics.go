package holdfast

import (
	"fmt"
	"iter"
	"math/bits"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/holdfast-dev/holdfast/observe"
)

// Stats is a snapshot of one namespace's measures: counters of events since
// the Cache was created, and gauges of its state now. Each measure has a
// name (Get), and All yields them all with their descriptions, so that an
// exporter publishes every one, a measure added later included, without a
// line of its own. The measures, in the order All yields them:
//
//	reads                 reads (Get, and each key of GetMany)
//	hot.hits              reads answered by the hot tier
//	shared.hits           reads answered by the shared tier (fresh or stale)
//	shared.misses         shared-tier reads that found nothing
//	shared.errors         shared-tier reads that failed or ran past the read budget
//	shared.bypassed       shared-tier calls skipped by an open breaker, or reads
//	                      skipped while the tier answered nothing (Policy.SlowReadGrace)
//	shared.set_errors     failed shared-tier writes (never a failed read)
//	shared.delete_errors  failed shared-tier deletes
//	corrupt_entries       stored bytes that failed to decode, read as misses
//	loads                 loader calls started (a GetMany's batch is one call)
//	load.keys             keys those calls asked for
//	load.errors           loader calls that failed, timed out or panicked
//	load.not_found        keys the loader found missing
//	load.timeouts         loader calls that had not returned at LoadTimeout
//	load.rejected         loads the load limiter rejected that readers waited for
//	loads.in_flight       loader calls running now (a gauge)
//	coalesced             reads that waited for another read's load
//	refreshes             background refreshes started
//	refresh.rejected      background refreshes the load limiter refused
//	stale_served          values served between soft and hard time
//	stale_on_error        values served past hard time because fresh data could not be had
//	stale_on_slow_load    ... because their load outlasted Policy.SlowLoadGrace
//	memory_on_slow_read   values from last-known-good because the shared tier was slow
//	local_served          values from last-known-good while the shared tier was down
//	negative_hits         cached not-found answers served
//	overloaded            reads that failed with ErrOverloaded
//	error_backoffs        reads answered without a load during the key's error backoff
//	invalidations         keys invalidated
//	dropped_stale_sets    loads finished after an invalidation of their key, not stored
//	refills               shared-tier misses (or older loads past their hard time)
//	                      answered from a current copy in memory and written back to
//	                      the tier instead of loaded
//	too_large             keys or values refused for their size
//	pending_deletes       invalidations waiting to be replayed (a gauge)
//	replayed_deletes      invalidations replayed after the shared tier recovered
//	dropped_deletes       invalidations that did not fit in the replay queue
//	leases.taken          loads made holding the key's lease
//	lease.waits           reads that waited for another process's lease
//	lease.gave_up         lease waits that ran out and loaded instead
//	smeared.reads         shared-tier reads of hot keys sent to one of their copies
//	smeared.writes        shared-tier writes of hot keys to all their copies
//	superseded_reads      shared-tier values older than their key's invalidation watermark
//	invalidations.sent    keys invalidated here and announced to every process
//	invalidations.heard   announcements of this namespace's keys heard, own included
//	invalidations.applied other processes' announcements that dropped a copy or left it a fallback
//	stream.gap_dropped    hot copies from before a stream gap, dropped when it was heard again
//	stream.unheard        milliseconds since the stream was last heard (a gauge)
//	warm_start.keys       keys the warm start put in the hot tier
//	warm_start.bytes      their envelopes' bytes
//	lifetimes.set         loaded values whose loader set their lifetime (SetLifetime)
//	lifetimes.clamped     of those, lifetimes clamped into Policy.Lifetime
//	shared_hot_keys       keys in the hot set every process shares (a gauge)
//	hot.entries           entries in the hot tier (a gauge)
//	hot.bytes             memory they take, as Hot.MaxBytes counts it (a gauge)
//	last_known_good.entries  entries in the last-known-good store (a gauge)
//	capability.*          1 when the namespace uses the shared tier's versions,
//	                      leases, smearing, hot_sharing, stream (gauges)
//
// All's descriptions say more about each.
type Stats struct {
	v   [len(statTable)]uint64
	hot []HotKey
}

// Get returns the value of the measure called name. It panics when there
// is none: the names are fixed, and a wrong one is a programming error, as
// a wrong field name would be.
func (s Stats) Get(name string) uint64 {
	i, ok := statIndex[name]
	if !ok {
		panic(fmt.Sprintf("holdfast: Stats has no measure %q", name))
	}
	return s.v[i]
}

// All yields each measure's description and value, in the same order in
// every Stats, the zero Stats included.
func (s Stats) All() iter.Seq2[observe.Metric, uint64] {
	return func(yield func(observe.Metric, uint64) bool) {
		for i := range statTable {
			if !yield(statTable[i].Metric, s.v[i]) {
				return
			}
		}
	}
}

// String lists the measures that are not 0, as name=value.
func (s Stats) String() string {
	var b strings.Builder
	for m, v := range s.All() {
		if v != 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", m.Name, v)
		}
	}
	return b.String()
}

// HotKeys returns the namespace's hot keys, fastest first, at most
// Hot.TopK; nil without a shared tier unless Hot.Threshold is positive.
func (s Stats) HotKeys() []HotKey { return s.hot }

// HotKey is a key read often enough to be hot, and its estimated rate.
type HotKey struct {
	Key  string
	Rate float64 // reads per second
}

// stat is one measure of Stats: a counter, the sum of some events' counts,
// or a gauge, read from the namespace when the snapshot is taken.
type stat struct {
	observe.Metric
	events []event
	level  func(n *Namespace) uint64
}

func counter(name, unit, help string, evs ...event) stat {
	return stat{Metric: observe.Metric{Name: name, Unit: unit, Help: help}, events: evs}
}

func gauge(name, unit, help string, level func(n *Namespace) uint64) stat {
	return stat{Metric: observe.Metric{Name: name, Unit: unit, Help: help, Gauge: true}, level: level}
}

// capability is the gauge of one capability a namespace uses.
func capability(name, help string, on func(c capabilities) bool) stat {
	return gauge("capability."+name, "1", help, func(n *Namespace) uint64 {
		if on(n.uses()) {
			return 1
		}
		return 0
	})
}

// statTable is every measure of Stats. The exporters publish each under its
// name, so a name, once published, stays.
var statTable = [...]stat{
	// A hot-tier hit before the flight is not counted in evRead; one
	// inside a flight is.
	counter("reads", "{read}", "Reads (Get, and each key of GetMany); hot.hits over it is the hot tier's share.", evRead, evHotHit),
	counter("hot.hits", "{read}", "Reads answered by the in-process hot tier.", evHotHit, evHotRecheckHit),
	counter("shared.hits", "{read}", "Shared-tier reads that found a value (fresh or stale).", evSharedHit),
	counter("shared.misses", "{read}", "Shared-tier reads that found nothing (corrupt entries included).", evSharedMiss),
	counter("shared.errors", "{read}", "Shared-tier reads that failed or ran past the read budget.", evSharedError),
	counter("shared.bypassed", "{call}", "Shared-tier calls skipped because the tier's breaker was open, or reads skipped while the tier answered nothing (Policy.SlowReadGrace).", evSharedBypassed),
	counter("shared.set_errors", "{write}", "Failed shared-tier writes; they never fail a read.", evSharedSetError),
	counter("shared.delete_errors", "{delete}", "Failed shared-tier deletes (invalidations).", evSharedDelError),
	counter("corrupt_entries", "{entry}", "Stored bytes that failed to decode and were read as misses.", evCorrupt),
	counter("loads", "{load}", "Loader calls started; a GetMany's batch is one call.", evLoad),
	counter("load.keys", "{key}", "Keys the loader calls asked for: one per Get's call, every key of a GetMany's batch.", evKeysLoaded),
	counter("load.errors", "{load}", "Loader calls that failed, timed out or panicked.", evLoadError),
	counter("load.not_found", "{key}", "Keys the loader found missing (ErrNotFound, or left out of a batch's map); cached as negative entries unless NegativeTTL is negative.", evLoadNotFound),
	counter("load.timeouts", "{load}", "Loader calls that had not returned at LoadTimeout; their readers were answered then.", evLoadTimeout),
	counter("load.rejected", "{load}", "Loads rejected by the load limiter that readers waited for: each reader got a stale value or ErrOverloaded.", evRejected),
	gauge("loads.in_flight", "{load}", "Loader calls of the namespace running now, each holding a slot of the load limit.", func(n *Namespace) uint64 { return uint64(n.limit.inUse()) }),
	counter("coalesced", "{read}", "Reads that waited for another read's fetch instead of loading.", evCoalesced),
	counter("refreshes", "{refresh}", "Background refreshes started (stale-while-revalidate and early refresh).", evRefresh),
	counter("refresh.rejected", "{refresh}", "Background refreshes the load limiter refused; their readers had been answered already, and the value stays until its hard time.", evRefreshRejected),
	counter("stale_served", "{read}", "Values served between their soft and hard time while a refresh ran.", evStaleServed),
	counter("stale_on_error", "{read}", "Values served past their hard time, or from last-known-good, because fresh data could not be had.", evStaleOnError),
	counter("stale_on_slow_load", "{read}", "Values served past their hard time, within stale-if-error, because their load outlasted SlowLoadGrace.", evStaleOnSlowLoad),
	counter("memory_on_slow_read", "{read}", "Values served from last-known-good because the shared tier had not answered within the slow-read delay (SlowReadGrace).", evMemoryOnSlowRead),
	counter("local_served", "{read}", "Values served from last-known-good while the shared tier was failing.", evLocalServed),
	counter("negative_hits", "{read}", "Cached not-found answers served.", evNegativeHit),
	counter("overloaded", "{read}", "Reads that failed with ErrOverloaded: rejected, nothing stale to serve.", evOverloaded),
	counter("error_backoffs", "{read}", "Reads answered without a load, stale or with the last load's error, because the key's loads were failing and its retry was not due (LoadErrorBackoff).", evErrorBackoff),
	counter("invalidations", "{key}", "Keys invalidated.", evInvalidation),
	counter("dropped_stale_sets", "{write}", "Loads that finished after their key was invalidated and were not stored.", evDroppedStaleSet),
	counter("refills", "{write}", "Shared-tier misses, or hits of an older load past its hard time, answered from a current copy in memory, written back to the tier instead of loaded (tier.Refiller, tier.OverRefiller): a restarted or emptied node, or a replica promoted without the latest loads, refilled without the source.", evRefilled),
	counter("too_large", "{key}", "Keys or values refused for their size.", evTooLarge),
	gauge("pending_deletes", "{key}", "Invalidations waiting to be replayed on the shared tier.", func(n *Namespace) uint64 { return uint64(n.pending.n.Load()) }),
	counter("replayed_deletes", "{key}", "Invalidations replayed on the shared tier after it recovered.", evReplayedDeletes),
	counter("dropped_deletes", "{key}", "Invalidations that did not fit in the replay queue.", evDroppedDeletes),
	counter("leases.taken", "{load}", "Loads made holding the key's lease (cross-process coalescing).", evLeaseTaken),
	counter("lease.waits", "{read}", "Reads that waited for another process's load under its lease.", evLeaseWaits),
	counter("lease.gave_up", "{read}", "Lease waits that ran out (the holder died or was slow) and loaded instead.", evLeaseGaveUp),
	counter("smeared.reads", "{read}", "Shared-tier reads of hot keys sent to one of their copies on another node (tier.Smearer).", evSmearedRead),
	counter("smeared.writes", "{write}", "Shared-tier writes of hot keys to every one of their copies (tier.Smearer).", evSmearedWrite),
	counter("superseded_reads", "{read}", "Shared-tier values older than an invalidation of their key made or heard here, read as misses (a node that missed the invalidation, as after a failover, or a delete still queued for replay).", evSuperseded),
	counter("invalidations.sent", "{key}", "Keys this process invalidated in the shared tier, each announced to every process (invalidation stream).", evInvalidationSent),
	counter("invalidations.heard", "{key}", "Announcements of this namespace's invalidations heard on the stream, this process's own included.", evInvalidationHeard),
	counter("invalidations.applied", "{key}", "Other processes' announcements that dropped a copy held here or left it a fallback.", evInvalidationApplied),
	counter("stream.gap_dropped", "{entry}", "Hot-tier copies found current before a gap in the invalidation stream, dropped when it was heard again: each key is read again on demand.", evUnheardDropped),
	gauge("stream.unheard", "ms", "Time since the invalidation stream was last heard; 0 while it is heard, or without a stream.", func(n *Namespace) uint64 {
		if n.c.caps.stream != nil && n.c.stream.gap.Load() {
			if d := n.exactNow() - n.c.stream.heard.Load(); d > 0 {
				return uint64(d / 1e6)
			}
		}
		return 0
	}),
	counter("warm_start.keys", "{key}", "Keys the warm start put in the hot tier from the shared hot set (Hot.Share).", evWarmStartKey),
	counter("warm_start.bytes", "By", "Bytes of the envelopes the warm start put in the hot tier.", evWarmStartBytes),
	counter("lifetimes.set", "{value}", "Loaded values whose loader set their own lifetime (holdfast.SetLifetime).", evLifetimeSet),
	counter("lifetimes.clamped", "{value}", "Loader-set lifetimes outside the namespace's Policy.Lifetime bounds, clamped into them.", evLifetimeClamped),
	gauge("shared_hot_keys", "{key}", "Keys in the hot set shared by every process, as last fetched (Policy.Hot.Share).", func(n *Namespace) uint64 {
		if set := n.sharedHot.Load(); set != nil && n.now() < set.until {
			return uint64(len(set.keys))
		}
		return 0
	}),
	gauge("hot.entries", "{entry}", "Entries in the hot tier.", func(n *Namespace) uint64 {
		if n.hot == nil {
			return 0
		}
		return uint64(n.hot.Stats().Entries)
	}),
	gauge("hot.bytes", "By", "Memory the hot tier's entries take, as Hot.MaxBytes counts it.", func(n *Namespace) uint64 {
		if n.hot == nil {
			return 0
		}
		return uint64(n.hot.Stats().Bytes)
	}),
	gauge("last_known_good.entries", "{entry}", "Entries in the last-known-good store.", func(n *Namespace) uint64 {
		if n.lkg == nil {
			return 0
		}
		return uint64(n.lkg.Stats().Entries)
	}),
	capability("versions", "1 when the namespace's loads write with a compare-and-set on the version read before the source (tier.Coordinator), so a value read before an invalidation is never stored after it.", func(c capabilities) bool { return c.Versions }),
	capability("leases", "1 when the namespace coalesces loads across processes with per-key leases (Policy.Lease, tier.Coordinator).", func(c capabilities) bool { return c.Leases }),
	capability("smearing", "1 when the namespace's hot keys have copies on several shared-tier nodes (tier.Smearer).", func(c capabilities) bool { return c.Smearing }),
	capability("hot_sharing", "1 when the namespace shares its hot set with every process (Policy.Hot.Share, tier.HotSharer).", func(c capabilities) bool { return c.HotSharing }),
	capability("stream", "1 when every invalidation is announced to every process (tier.InvalidationStream).", func(c capabilities) bool { return c.Stream }),
}

// statIndex is each measure's index in statTable, by name.
var statIndex = func() map[string]int {
	m := make(map[string]int, len(statTable))
	for i, s := range statTable {
		m[s.Name] = i
	}
	return m
}()

type event int

const (
	evRead          event = iota
	evHotHit              // answered by the hot tier before the flight: not counted in evRead
	evHotRecheckHit       // answered by the hot tier inside a flight: counted in evRead too
	evSharedHit
	evSharedMiss
	evSharedError
	evSharedBypassed
	evSharedSetError
	evSharedDelError
	evCorrupt
	evLoad
	evKeysLoaded
	evLoadError
	evLoadNotFound
	evCoalesced
	evRefresh
	evStaleServed
	evStaleOnError
	evStaleOnSlowLoad
	evMemoryOnSlowRead
	evLocalServed
	evNegativeHit
	evRejected
	evRefreshRejected
	evOverloaded
	evInvalidation
	evDroppedStaleSet
	evTooLarge
	evReplayedDeletes
	evDroppedDeletes
	evLeaseTaken
	evLeaseWaits
	evLeaseGaveUp
	evErrorBackoff
	evSmearedRead
	evSmearedWrite
	evSuperseded
	evLoadTimeout
	evInvalidationSent
	evInvalidationHeard
	evInvalidationApplied
	evUnheardDropped
	evWarmStartKey
	evWarmStartBytes
	evLifetimeSet
	evLifetimeClamped
	evRefilled
	numEvents
)

// counters are striped: each goroutine increments the stripe picked by the
// address of its stack, so that parallel hits on the same namespace (or the
// same hot key) write different cache lines, and one goroutine keeps writing
// the same line, which stays in its core's cache. (A random stripe per
// increment was measured here at 15 ns of a 50 ns hit: the lines bounced
// between cores.) Reads of a snapshot add the stripes up; they are rare.
type counters struct {
	mask    uint32
	stripes []stripe
}

type stripe struct {
	v [numEvents]atomic.Uint64
	_ [64]byte
}

func newCounters() *counters {
	n := 32 * runtime.GOMAXPROCS(0)
	if n > 1024 {
		n = 1024
	}
	n = 1 << bits.Len(uint(n-1))
	return &counters{mask: uint32(n - 1), stripes: make([]stripe, n)}
}

func (c *counters) add(e event, n uint64) {
	c.stripes[stackStripe()&c.mask].v[e].Add(n)
}

// stackStripe hashes the address of a variable on the calling goroutine's
// stack. Goroutine stacks are at least 2 KiB apart, so distinct goroutines
// get (mostly) distinct stripes, and a goroutine gets the same one each time
// until its stack moves. The address is only hashed, never dereferenced.
//
//go:nosplit
func stackStripe() uint32 {
	var marker byte
	p := uintptr(unsafe.Pointer(&marker))
	return uint32((uint64(p>>11) * 0x9E3779B97F4A7C15) >> 32)
}

func (c *counters) inc(e event) { c.add(e, 1) }

func (c *counters) sum(e event) uint64 {
	var t uint64
	for i := range c.stripes {
		t += c.stripes[i].v[e].Load()
	}
	return t
}
