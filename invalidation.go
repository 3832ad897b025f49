package holdfast

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// pendingDeletes holds a namespace's invalidations whose shared-tier delete
// failed or was skipped by an open breaker. They are replayed until the tier
// takes them (without the replay, an eviction that fails during an outage
// leaves an old value until its TTL); meanwhile the key's watermark keeps
// the tier's older copy from being read here.
//
// The set is bounded and deduplicated; each key keeps a sequence number so a
// replay that raced a newer invalidation of the same key does not forget it.
type pendingDeletes struct {
	n    atomic.Int64 // len(keys), read without the lock (replay, Stats)
	mu   sync.Mutex
	keys map[string]uint64
	seq  uint64
}

// has reports whether key is waiting to be replayed.
func (p *pendingDeletes) has(key string) bool {
	if p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	_, ok := p.keys[key]
	p.mu.Unlock()
	return ok
}

// add records key and reports whether it fit under max.
func (p *pendingDeletes) add(key string, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = make(map[string]uint64)
	}
	if _, ok := p.keys[key]; !ok && len(p.keys) >= max {
		return false
	}
	p.seq++
	p.keys[key] = p.seq
	p.n.Store(int64(len(p.keys)))
	return true
}

// batch returns up to max pending keys with their sequence numbers.
func (p *pendingDeletes) batch(max int) ([]string, []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, min(max, len(p.keys)))
	seqs := make([]uint64, 0, cap(keys))
	for k, s := range p.keys {
		if len(keys) == max {
			break
		}
		keys = append(keys, k)
		seqs = append(seqs, s)
	}
	return keys, seqs
}

// done forgets keys whose deletes went through, unless invalidated again
// since the batch was taken.
func (p *pendingDeletes) done(keys []string, seqs []uint64) {
	p.mu.Lock()
	for i, k := range keys {
		if p.keys[k] == seqs[i] {
			delete(p.keys, k)
		}
	}
	p.n.Store(int64(len(p.keys)))
	p.mu.Unlock()
}

// replayBatch is how many keys one replay sends in one Delete call.
const replayBatch = 256

// replayInvalidations runs while the cache is open and has a shared tier:
// every ReplayInterval while a namespace holds pending deletes it retries
// them; while none does it waits for the next to be queued, so that an
// idle process pays no wake-ups for it.
func (c *Cache) replayInvalidations() {
	t := time.NewTicker(c.opts.ReplayInterval)
	defer t.Stop()
	for {
		if !slices.ContainsFunc(c.namespaceList(), func(ns *Namespace) bool { return ns.pending.n.Load() > 0 }) {
			t.Stop()
			select {
			case <-c.ctx.Done():
				return
			case <-c.replayQueued:
			}
			t.Reset(c.opts.ReplayInterval)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		for _, ns := range c.namespaceList() {
			ns.replayPending(c.ctx)
		}
	}
}

// everyInterval calls f for each namespace every d, on the calling
// goroutine, until the Cache closes.
func (c *Cache) everyInterval(d time.Duration, f func(*Namespace)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		for _, ns := range c.namespaceList() {
			f(ns)
		}
	}
}

// replayPending sends one batch of this namespace's pending deletes.
func (n *Namespace) replayPending(ctx context.Context) {
	if n.pending.n.Load() == 0 {
		return
	}
	keys, seqs := n.pending.batch(replayBatch)
	qualified := make([]string, len(keys))
	for i, k := range keys {
		qualified[i] = n.prefix + k
	}
	ctx, cancel := context.WithTimeout(ctx, n.c.opts.ReplayInterval)
	defer cancel()
	if err := n.deleteShared(ctx, qualified...); err != nil {
		n.countTierError(err, evSharedDelError)
		return
	}
	n.pending.done(keys, seqs)
	n.marks.requeue(keys)
	n.ctr.add(evReplayedDeletes, uint64(len(keys)))
	n.countSent(len(keys))
	n.c.logger().Info("holdfast: replayed invalidations", "namespace", n.name, "keys", len(keys))
}

// watermarks holds each key's invalidation watermark: when this process
// last invalidated it (own) and when it last heard another process do so
// (other), in Unix nanoseconds. A copy whose origin is before a watermark
// may predate the write the invalidation announced (grade): read from the
// shared tier it is a miss, whichever process invalidated, since a Redis
// node can answer from data that never saw the delete (a demoted primary
// after a failover, a write lost in a takeover, a delete still queued for
// replay); in memory it is a fallback for a failed load when the
// invalidation was another process's, and never served after this
// process's own (read-your-invalidations). A watermark lasts the longest
// lifetime a value may have plus its longest stale-if-error window
// (supersedeWindow), past which every copy it superseded is past every
// window it could be served in; at most maxWatermarks are kept, the
// oldest forgotten first, except those keep holds on to: a key whose
// delete is still queued for replay, whose old value the shared tier
// still holds, keeps its watermark until the replay lands (requeue).
type watermarks struct {
	at    sync.Map   // key -> watermark
	mu    sync.Mutex // orders queue and the writes to at
	queue []marked
	head  int                   // queue[:head] is forgotten
	keep  func(key string) bool // nil: none is kept past the bound
}

type watermark struct{ own, other int64 }

func (w watermark) last() int64 { return max(w.own, w.other) }

type marked struct {
	key string
	w   watermark
}

const maxWatermarks = 1 << 16

// grade is what a copy of a key may be used for against its watermark.
type grade uint8

const (
	gradeCurrent  grade = iota
	gradeFallback       // only another process's invalidation is newer: a failed load's fallback
	gradeNone           // this process's own invalidation is newer: never served
)

// raise moves key's watermark up to up, and forgets entries older than
// window or past the bound, calling forgotten for each.
func (r *watermarks) raise(key string, up watermark, window int64, forgotten func(string, watermark)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, _ := r.at.Load(key)
	w, _ := v.(watermark)
	w = watermark{max(w.own, up.own), max(w.other, up.other)}
	r.at.Store(key, w)
	r.queue = append(r.queue, marked{key, w})
	for r.head < len(r.queue) && (len(r.queue)-r.head > maxWatermarks || r.queue[r.head].w.last() < w.last()-window) {
		old := r.queue[r.head]
		r.queue[r.head] = marked{}
		r.head++
		if v, _ := r.at.Load(old.key); v != old.w {
			continue // raised since: a later entry holds it
		}
		if r.keep != nil && r.keep(old.key) {
			continue // out of the queue until requeued
		}
		r.at.Delete(old.key)
		forgotten(old.key, old.w)
	}
	// Forgotten entries are cut off once they are half the queue, so that
	// a full queue costs each raise a constant, not a copy of the queue.
	if r.head > len(r.queue)/2 {
		r.queue = append(r.queue[:0:0], r.queue[r.head:]...)
		r.head = 0
	}
}

// requeue puts keys that keep held on to back in the queue, to be forgotten
// as the others are.
func (r *watermarks) requeue(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range keys {
		if v, ok := r.at.Load(key); ok {
			r.queue = append(r.queue, marked{key, v.(watermark)})
		}
	}
}

// grade grades a copy of key whose origin is origin at now.
func (r *watermarks) grade(key string, origin, now, window int64) grade {
	v, _ := r.at.Load(key)
	w, ok := v.(watermark)
	// Another process's time is another clock's, clamped to this one's
	// when it was heard: a copy of that very instant may be older.
	switch {
	case !ok:
	case origin < w.own && now-w.own < window:
		return gradeNone
	case origin <= w.other && now-w.other < window:
		return gradeFallback
	}
	return gradeCurrent
}

// grade grades a copy m of key at now against its watermark.
func (n *Namespace) grade(key string, m *meta, now int64) grade {
	return n.marks.grade(key, m.origin, now, n.supersedeWindow())
}

// raiseMark moves key's watermark up to up. A copy in last-known-good that
// another process's invalidation left a fallback is dropped if the bound
// forgets the watermark first: it would read as current again.
func (n *Namespace) raiseMark(key string, up watermark) {
	n.marks.raise(key, up, n.supersedeWindow(), func(key string, w watermark) {
		if n.lkg != nil {
			if m := n.lkg.Get(key, n.now()); m != nil && m.origin <= w.other {
				n.lkg.Delete(key)
			}
		}
	})
}

// Invalidate removes keys from this process's tiers and from the shared
// tier, in one call to the shared tier. A load of a key that began before
// Invalidate is not stored after it, and this process never again reads a
// value of the key loaded before it (read-your-invalidations: the key's
// watermark).
//
// When the shared tier's delete fails or is skipped (an open breaker, an
// ejected node), the local copies are dropped all the same and the deletes
// are queued and replayed until the tier takes them; meanwhile this process
// reads the tier's older copies of those keys as misses. Invalidate returns
// nil in that case too. It returns an error only when the replay queue is
// full (the delete of those keys is then lost for the shared tier: other
// processes may serve the old values until their TTL), for a key that is
// too long, or after Close.
func (n *Namespace) Invalidate(ctx context.Context, keys ...string) error {
	if n.c.closed.Load() {
		return ErrClosed
	}
	for _, key := range keys {
		if err := n.checkKey(key); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	n.ctr.add(evInvalidation, uint64(len(keys)))
	at := n.c.clock.Now().UnixNano()
	for _, key := range keys {
		if n.c.opts.Shared != nil {
			n.raiseMark(key, watermark{own: at})
		}
		// Flights in progress may hold a value read from the source before
		// the caller's write: they must not store it anywhere.
		n.flights.invalidate(key)
		n.forgetLoadFailure(key)
	}
	var err error
	if n.c.opts.Shared != nil {
		qualified := make([]string, len(keys))
		for i, key := range keys {
			qualified[i] = n.prefix + key
		}
		derr := n.deleteShared(ctx, qualified...)
		if derr == nil {
			n.countSent(len(keys))
		} else {
			n.countTierError(derr, evSharedDelError)
			// Which keys failed is not known: replay them all (a second
			// delete and version bump of a key is harmless).
			var lost []string
			for _, key := range keys {
				if !n.pending.add(key, n.c.opts.MaxPendingInvalidations) {
					lost = append(lost, key)
				}
			}
			select {
			case n.c.replayQueued <- struct{}{}:
			default: // the replay loop has been told already
			}
			if len(lost) > 0 {
				n.ctr.add(evDroppedDeletes, uint64(len(lost)))
				n.c.logger().Warn("holdfast: invalidation replay queue full; shared copies left until their TTL", "namespace", n.name, "keys", lost)
				err = fmt.Errorf("holdfast: %s: invalidate %q in the shared tier (replay queue full): %w", n.name, lost, derr)
			}
		}
		// A read that began while the delete was on its way may have found
		// the old value still in the shared tier: its flight must not copy
		// it into this process's tiers either.
		for _, key := range keys {
			n.flights.invalidate(key)
		}
	}
	// Local copies go last, so none read before the shared delete survives.
	for _, key := range keys {
		if n.hot != nil {
			n.hot.Delete(key)
		}
		if n.lkg != nil {
			n.lkg.Delete(key)
		}
	}
	return err
}

// countSent counts keys whose invalidation the shared tier took, when it
// announces invalidations.
func (n *Namespace) countSent(keys int) {
	if n.c.caps.stream != nil {
		n.ctr.add(evInvalidationSent, uint64(keys))
	}
}

// supersedeWindow is how long a watermark lasts: past it, a value older
// than it
// is past its hard time and stale-if-error window, the longest a loader
// may set included.
func (n *Namespace) supersedeWindow() int64 {
	return int64(max(n.p.TTL, n.p.Lifetime.Max) + max(n.p.StaleIfError, n.p.Lifetime.MaxStaleIfError))
}

// deleteShared removes qualified keys from the shared tier, bumping their
// versions when the tier is a tier.Coordinator.
func (n *Namespace) deleteShared(ctx context.Context, keys ...string) error {
	if n.coord != nil {
		ctx = tier.WithOrigin(ctx, n.c.id)
		return n.coord.Invalidate(ctx, keys...)
	}
	return n.c.opts.Shared.Delete(ctx, keys...)
}
