package holdfast

import (
	"math/bits"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Stats is a snapshot of one namespace's counters. Every field counts events
// since the Cache was created.
type Stats struct {
	Reads             uint64 // reads (Get, and each key of GetMany)
	HotHits           uint64 // reads answered by the hot tier
	SharedHits        uint64 // reads answered by the shared tier (fresh or stale)
	SharedMisses      uint64 // shared-tier reads that found nothing
	SharedErrors      uint64 // shared-tier reads that failed or ran past the read budget
	SharedBypassed    uint64 // shared-tier calls skipped by an open breaker (reads and writes), or reads skipped because the tier answered nothing for a while (Policy.SlowReadGrace)
	SharedSetErrors   uint64 // failed shared-tier writes (never a failed read)
	SharedDelErrors   uint64 // failed shared-tier deletes
	Corrupt           uint64 // stored bytes that failed to decode; read as misses
	Loads             uint64 // loader calls started (a GetMany's batch is one call)
	KeysLoaded        uint64 // keys those calls asked for: one a Get's, every key of a GetMany's batch
	LoadErrors        uint64 // loader calls that failed, timed out or panicked
	LoadNotFound      uint64 // keys the loader found missing (ErrNotFound, or left out of a batch's map)
	Coalesced         uint64 // reads that waited for another read's load instead of loading
	Refreshes         uint64 // background refreshes started
	StaleServed       uint64 // values served between soft and hard time (while revalidating)
	StaleOnError      uint64 // values served past hard time, or from last-known-good, because fresh data could not be had
	StaleOnSlowLoad   uint64 // values served past hard time, within stale-if-error, because their load outlasted Policy.SlowLoadGrace
	MemoryOnSlowRead  uint64 // values served from last-known-good because the shared tier had not answered within the slow-read delay (Policy.SlowReadGrace)
	MemoryForBusyNode uint64 // fresh values served from last-known-good instead of reading a shared-tier node that carried more than its share of reads (tier.Leveler)
	LocalServed       uint64 // values served from last-known-good while the shared tier was down
	NegativeHits      uint64 // cached not-found answers served
	Rejected          uint64 // loads rejected by the load limiter that readers waited for (they got a stale value, or ErrOverloaded)
	RefreshesRejected uint64 // background refreshes the load limiter refused (their readers had their answer; the value stays until its hard time)
	Overloaded        uint64 // reads that failed with ErrOverloaded (rejected and nothing stale to serve)
	Invalidations     uint64 // keys invalidated
	DroppedStaleSets  uint64 // loads finished after an invalidation of their key, not stored
	TooLarge          uint64 // keys or values refused for their size
	PendingDeletes    uint64 // invalidations waiting to be replayed on the shared tier (a gauge)
	ReplayedDeletes   uint64 // invalidations replayed on the shared tier after it recovered
	DroppedDeletes    uint64 // invalidations that did not fit in the replay queue
	LeasesTaken       uint64 // loads this process made holding the key's lease
	LeaseWaits        uint64 // reads that found another process's lease and waited for its value
	LeaseGaveUp       uint64 // lease waits that ran out (the holder died or was slow) and loaded instead
	ErrorBackoffs     uint64 // reads answered without a load, stale or with the last load's error, because the key's loads were failing and its retry was not due (LoadErrorBackoff)
	SmearedReads      uint64 // shared-tier reads of hot keys sent to one of their copies (tier.Smearer)
	SmearedWrites     uint64 // shared-tier writes of hot keys to all their copies (tier.Smearer)
	Superseded        uint64 // shared-tier values loaded before this process's own later invalidation of their key, read as misses (a node that missed the invalidation, as after a failover)
	LoadTimeouts      uint64 // loader calls that had not returned at LoadTimeout; their readers were answered then
	SharedHotKeys     uint64 // keys in the hot set shared by every process, as last fetched (a gauge; Hot.Share)
	HotEntries        uint64 // entries now in the hot tier (a gauge)
	HotBytes          uint64 // memory the hot tier's entries take, as Hot.MaxBytes counts it (a gauge)
	LastKnownGoodKeys uint64 // entries now in the last-known-good store (a gauge)

	// With a shared tier that announces invalidations to every process
	// (tier.InvalidationStream):
	InvalidationsSent    uint64 // keys this process invalidated in the shared tier, each announced to every process
	InvalidationsHeard   uint64 // announcements of this namespace's keys heard, this process's own included
	InvalidationsApplied uint64 // other processes' announcements that dropped or demoted a copy held here
	Revalidated          uint64 // hot-tier copies checked against the shared tier after the stream was not heard for a while
	RevalidationDropped  uint64 // of those, the copies dropped: the shared tier no longer held the same load
	UnheardMillis        uint64 // milliseconds since the stream was last heard (a gauge; 0 while it is heard or without a stream)
	WarmStartKeys        uint64 // keys the warm start put in the hot tier (Hot.Share)
	WarmStartBytes       uint64 // their envelopes' bytes

	LifetimesSet     uint64 // loaded values whose loader set their lifetime (SetLifetime)
	LifetimesClamped uint64 // of those, lifetimes outside Policy.Lifetime, clamped into it

	// Capabilities is what the namespace uses of the shared tier's
	// capabilities (not a counter).
	Capabilities Capabilities
}

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
	evMemoryForBusyNode
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
	evRevalidated
	evRevalidationDropped
	evWarmStartKey
	evWarmStartBytes
	evLifetimeSet
	evLifetimeClamped
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

func (c *counters) snapshot() Stats {
	return Stats{
		Reads:             c.sum(evRead) + c.sum(evHotHit),
		HotHits:           c.sum(evHotHit) + c.sum(evHotRecheckHit),
		SharedHits:        c.sum(evSharedHit),
		SharedMisses:      c.sum(evSharedMiss),
		SharedErrors:      c.sum(evSharedError),
		SharedBypassed:    c.sum(evSharedBypassed),
		SharedSetErrors:   c.sum(evSharedSetError),
		SharedDelErrors:   c.sum(evSharedDelError),
		Corrupt:           c.sum(evCorrupt),
		Loads:             c.sum(evLoad),
		KeysLoaded:        c.sum(evKeysLoaded),
		LoadErrors:        c.sum(evLoadError),
		LoadNotFound:      c.sum(evLoadNotFound),
		Coalesced:         c.sum(evCoalesced),
		Refreshes:         c.sum(evRefresh),
		StaleServed:       c.sum(evStaleServed),
		StaleOnError:      c.sum(evStaleOnError),
		StaleOnSlowLoad:   c.sum(evStaleOnSlowLoad),
		MemoryOnSlowRead:  c.sum(evMemoryOnSlowRead),
		MemoryForBusyNode: c.sum(evMemoryForBusyNode),
		LocalServed:       c.sum(evLocalServed),
		NegativeHits:      c.sum(evNegativeHit),
		Rejected:          c.sum(evRejected),
		RefreshesRejected: c.sum(evRefreshRejected),
		Overloaded:        c.sum(evOverloaded),
		Invalidations:     c.sum(evInvalidation),
		DroppedStaleSets:  c.sum(evDroppedStaleSet),
		TooLarge:          c.sum(evTooLarge),
		ReplayedDeletes:   c.sum(evReplayedDeletes),
		DroppedDeletes:    c.sum(evDroppedDeletes),
		LeasesTaken:       c.sum(evLeaseTaken),
		LeaseWaits:        c.sum(evLeaseWaits),
		LeaseGaveUp:       c.sum(evLeaseGaveUp),
		ErrorBackoffs:     c.sum(evErrorBackoff),
		SmearedReads:      c.sum(evSmearedRead),
		SmearedWrites:     c.sum(evSmearedWrite),
		Superseded:        c.sum(evSuperseded),
		LoadTimeouts:      c.sum(evLoadTimeout),

		InvalidationsSent:    c.sum(evInvalidationSent),
		InvalidationsHeard:   c.sum(evInvalidationHeard),
		InvalidationsApplied: c.sum(evInvalidationApplied),
		Revalidated:          c.sum(evRevalidated),
		RevalidationDropped:  c.sum(evRevalidationDropped),
		WarmStartKeys:        c.sum(evWarmStartKey),
		WarmStartBytes:       c.sum(evWarmStartBytes),
		LifetimesSet:         c.sum(evLifetimeSet),
		LifetimesClamped:     c.sum(evLifetimeClamped),
	}
}
