package holdfast

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// A flight is one fetch of one key — shared-tier read, then load if needed —
// that every concurrent reader of the key in this process waits on, so that
// same-key misses run the loader once (Spring's cache with its default,
// non-locking Redis writer ran it 16 times for 16 concurrent misses).
//
// A flight can publish twice: first a stale value that waiters take at once,
// then, after the background refresh, the final outcome. Readers that join
// after a published stale value has passed its hard time wait for the final
// outcome instead: past hard there is one synchronous load, not a stale read.
type flight struct {
	// mu hands the outcomes to waiters. The channels are made by the first
	// reader that waits, so a flight nobody joins — a shared-tier hit, the
	// common miss of the hot tier — allocates no channel.
	mu       sync.Mutex
	first    chan struct{} // closed when firstOut is set; nil until someone waits
	finished chan struct{} // closed when finalOut is set; nil until someone waits
	firstOut outcome
	finalOut outcome
	ended    bool // finalOut is set; under mu

	// storeMu orders storing the flight's value against an invalidation of
	// its key: Invalidate sets invalidated under storeMu, and the flight
	// stores only while holding storeMu with invalidated false. So either
	// the store happens wholly before the invalidation's deletes, or not at
	// all (the "stale set" race).
	storeMu     sync.Mutex
	invalidated bool

	// published is written only by the flight's own goroutine, under mu;
	// that goroutine reads it without the lock, waiters under it.
	published bool

	// stage is what the flight waits on, which sets its readers' deadline
	// (see wait.go), and copy is the value they may take at the load
	// stage's deadline, with the tier it is from (nil for none). Under mu.
	// A reader waits for a change on staged, made by the first such
	// reader, so a flight nobody waits on allocates nothing.
	stage    stage
	copy     *meta
	copyFrom Source
	staged   chan struct{}
	// readOver is set once the flight's shared-tier read has answered:
	// from then on no reader takes a copy for a slow read. An atomic word
	// rather than a stage change: it is written on every shared hit.
	readOver atomic.Bool

	// seen is set, under the group shard's lock, when anyone but the
	// leader takes the flight from the group: a reader joining it, an
	// invalidation detaching it. A flight never seen is the leader's
	// alone once it leaves the group (leave).
	seen bool
}

type outcome struct {
	res Result
	err error
}

// flightPool holds flights that only their leader ever saw, for reuse:
// a flight is the one allocation of a shared-tier hit that the hot tier
// missed, and reusing it was worth about a twentieth of the shared-hit
// throughput (BenchmarkGetSharedHitRatio).
var flightPool = sync.Pool{New: func() any { return new(flight) }}

func newFlight() *flight { return flightPool.Get().(*flight) }

// closed is a closed channel: what a waiter gets when the outcome it waits
// for is already there.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// publish hands an outcome to the waiters, once. Later calls are ignored.
func (f *flight) publish(res Result, err error) {
	if f.published {
		return
	}
	f.mu.Lock()
	f.published = true
	f.firstOut = outcome{res, err}
	if f.first != nil {
		close(f.first)
	}
	f.mu.Unlock()
}

// finish records the flight's final outcome, publishing it too if nothing was
// published yet.
func (f *flight) finish(res Result, err error) {
	f.publish(res, err)
	f.mu.Lock()
	f.finalOut = outcome{res, err}
	f.ended = true
	if f.finished != nil {
		close(f.finished)
	}
	f.mu.Unlock()
}

// setStage moves the flight to stage st, with copy m from src for its
// readers to take at the stage's deadline, and wakes the readers waiting
// on the stage.
func (f *flight) setStage(st stage, m *meta, src Source) {
	f.mu.Lock()
	f.stage, f.copy, f.copyFrom = st, m, src
	if f.staged != nil {
		close(f.staged)
		f.staged = nil
	}
	f.mu.Unlock()
}

// stageNow returns the flight's stage and copy, and a channel closed when
// they change; nil in the load stage, the last, so that a miss's reader
// makes none.
func (f *flight) stageNow() (st stage, m *meta, src Source, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stage == stageLoad {
		return f.stage, f.copy, f.copyFrom, nil
	}
	if f.staged == nil {
		f.staged = make(chan struct{})
	}
	return f.stage, f.copy, f.copyFrom, f.staged
}

// firstReady returns a channel closed once firstOut is set.
func (f *flight) firstReady() <-chan struct{} { return f.ready(&f.first, &f.published) }

// finishedReady returns a channel closed once finalOut is set.
func (f *flight) finishedReady() <-chan struct{} { return f.ready(&f.finished, &f.ended) }

// ready returns *ch, making it if no one has waited yet, or closed if *set
// says its outcome is there already.
func (f *flight) ready(ch *chan struct{}, set *bool) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *set {
		return closed
	}
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// beginStore takes the store lock and reports whether the flight may still
// store; endStore must be called after either way.
func (f *flight) beginStore() bool {
	f.storeMu.Lock()
	return !f.invalidated
}

func (f *flight) endStore() { f.storeMu.Unlock() }

// flightGroup tracks the flights in progress, one per key. It is sharded so
// that misses on different keys do not contend on one lock.
type flightGroup struct {
	seed   maphash.Seed
	shards [64]flightShard
}

type flightShard struct {
	mu sync.Mutex
	m  map[string]*flight
	_  [40]byte
}

func newFlightGroup() *flightGroup {
	g := &flightGroup{seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].m = make(map[string]*flight)
	}
	return g
}

func (g *flightGroup) shard(key string) *flightShard {
	return &g.shards[maphash.String(g.seed, key)%uint64(len(g.shards))]
}

// join returns the flight for key, starting one if there is none; leader is
// true when the caller started it and must run it.
func (g *flightGroup) join(key string) (f *flight, leader bool) {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if f = sh.m[key]; f != nil {
		f.seen = true
		return f, false
	}
	f = newFlight()
	sh.m[key] = f
	return f, true
}

// inProgress reports whether a flight for key is running.
func (g *flightGroup) inProgress(key string) bool {
	sh := g.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[key] != nil
}

// done removes f if it is still the flight for key. An invalidation may have
// detached it already and a newer flight may have taken its place.
func (g *flightGroup) done(key string, f *flight) {
	sh := g.shard(key)
	sh.mu.Lock()
	if sh.m[key] == f {
		delete(sh.m, key)
	}
	sh.mu.Unlock()
}

// leave is done for a leader whose flight has its answer. When no one but
// the leader ever saw f, no one can now (the group was the only way to
// it), so nobody waits on its outcome or saw one it published: leave then
// returns f to the pool and reports true, and the leader must not touch f
// again. Otherwise it reports false and the leader finishes f.
func (g *flightGroup) leave(key string, f *flight) bool {
	sh := g.shard(key)
	sh.mu.Lock()
	if sh.m[key] == f {
		delete(sh.m, key)
	}
	alone := !f.seen
	sh.mu.Unlock()
	if alone {
		*f = flight{}
		flightPool.Put(f)
	}
	return alone
}

// invalidate detaches the flight for key, if any, and marks it so that it
// stores nothing. It returns after any store the flight had begun is over.
// Readers that arrive afterwards start a new flight.
func (g *flightGroup) invalidate(key string) {
	sh := g.shard(key)
	sh.mu.Lock()
	f := sh.m[key]
	if f != nil {
		f.seen = true
	}
	delete(sh.m, key)
	sh.mu.Unlock()
	if f != nil {
		f.storeMu.Lock()
		f.invalidated = true
		f.storeMu.Unlock()
	}
}
