package holdfast

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// Invalidations heard from other processes (tier.InvalidationStream).
//
// Without a stream, a process learns of another's invalidation only when its
// own copy expires: the hot tier's copy of a key lives up to Hot.TTL (a
// minute by default), and the hot tier holds exactly the keys with the most
// readers. With one, every invalidation is announced, and each process drops
// its hot copy of the key as it hears the announcement and raises the key's
// watermark (invalidation.go): its older last-known-good copy is then a
// fallback for stale-if-error only, and older shared-tier values of the key
// read as misses (a replica behind its primary may still hold one).
//
// A stream can break (a disconnect, a frozen server, a failover), and a
// process cannot hear what it missed. It does not flush then: its hot tier
// goes on answering for Hot.MaxUnheard after the stream was last heard, and
// is emptied only past that, admitting nothing until the stream is heard
// again; last-known-good answers within the TTL as it always does while the
// shared tier fails. When the stream is heard again, the hot tier drops
// every copy found current before then, and takes none read before then
// (putHot): each key is read again on demand, so nothing it serves is older
// than an invalidation it missed. One shared read per key read again costs
// about what checking every copy held did, and leaves no check to retry.

// streamCheckEvery is how often the stream's state is looked at during a
// gap: how late past Hot.MaxUnheard a hot tier may be emptied.
const streamCheckEvery = 50 * time.Millisecond

// warmStartBatch is how many keys one read of a warm start asks for.
const warmStartBatch = 256

// streamState is what the Cache knows of its stream.
type streamState struct {
	heard   atomic.Int64 // clock's Unix nanoseconds of the last Heard
	gap     atomic.Bool  // Lost since the last Heard (or never heard yet)
	resumed chan struct{}
	lost    chan struct{} // signalled when a gap begins
	// resumedAt is when the last gap ended: copies found current since
	// were found while the stream was heard.
	resumedAt atomic.Int64
	// lostHeard is heard when the latest gap began, and prevFrom and
	// prevTo the heard period that gap ended: from its resumedAt to its
	// last Heard. A copy found current in it missed nothing but what the
	// one gap since may have hidden (refill.go).
	lostHeard        atomic.Int64
	prevFrom, prevTo atomic.Int64
	// lostAt is when the latest gap began (Lost), 0 before the first.
	lostAt atomic.Int64
	// first is closed when the stream is first heard.
	first     chan struct{}
	firstOnce sync.Once
}

// streamFirstWait bounds how long NewCache waits for its stream to be
// first heard: a subscription takes a round trip or two.
const streamFirstWait = 250 * time.Millisecond

// listener is the Cache's tier.Listener.
type listener struct{ c *Cache }

var _ tier.Listener = listener{}

func (l listener) Invalidated(key string, at time.Time, origin string) {
	n := l.c.namespaceOf(key)
	if n == nil {
		return
	}
	n.ctr.inc(evInvalidationHeard)
	if origin != l.c.id {
		n.invalidatedElsewhere(key[len(n.prefix):], at.UnixNano())
	}
}

func (l listener) Heard() {
	s := &l.c.stream
	now := l.c.clock.Now().UnixNano()
	s.heard.Store(now)
	if s.gap.Load() {
		s.prevFrom.Store(s.resumedAt.Load())
		s.prevTo.Store(s.lostHeard.Load())
		s.resumedAt.Store(now)
	}
	if s.gap.CompareAndSwap(true, false) {
		select {
		case s.resumed <- struct{}{}:
		default:
		}
		s.firstOnce.Do(func() { close(s.first) })
	}
}

func (l listener) Lost() {
	s := &l.c.stream
	if !s.gap.Load() {
		// Before the gap shows: a copy checked in between is refused.
		s.lostAt.Store(l.c.clock.Now().UnixNano())
	}
	if s.gap.CompareAndSwap(false, true) {
		s.lostHeard.Store(s.heard.Load())
		select {
		case s.lost <- struct{}{}:
		default:
		}
	}
}

// namespaceOf returns the namespace of a qualified key, or nil.
func (c *Cache) namespaceOf(key string) *Namespace {
	name, _, ok := strings.Cut(key, ":")
	if !ok {
		return nil
	}
	c.mu.Lock()
	n := c.namespaces[name]
	c.mu.Unlock()
	return n
}

// listen runs on a goroutine of the Cache's while its shared tier is a
// tier.InvalidationStream: the stream's events on one goroutine, and the
// gaps watched on another.
func (c *Cache) listen(stream tier.InvalidationStream) {
	c.goOwned(c.watchStream)
	stream.Listen(c.ctx, listener{c})
}

// watchStream empties the hot tiers that have gone unheard too long, and
// drops their copies from before the gap when the stream is heard again.
// While the stream is heard it waits for a gap instead of ticking: an idle
// process pays no wake-ups for it.
func (c *Cache) watchStream() {
	t := time.NewTicker(streamCheckEvery)
	defer t.Stop()
	for {
		resumed := false
		if !c.stream.gap.Load() {
			t.Stop()
			select {
			case <-c.ctx.Done():
				return
			case <-c.stream.lost:
				t.Reset(streamCheckEvery)
				continue
			case <-c.stream.resumed:
				resumed = true
			}
		} else {
			select {
			case <-c.ctx.Done():
				return
			case <-c.stream.resumed:
				resumed = true
			case <-t.C:
			}
		}
		gap := c.stream.gap.Load()
		unheard := c.clock.Now().UnixNano() - c.stream.heard.Load()
		for _, n := range c.namespaceList() {
			if n.hot == nil {
				continue
			}
			switch {
			case gap && unheard >= int64(n.p.Hot.MaxUnheard):
				if n.hotOff.CompareAndSwap(false, true) {
					n.hot.Clear()
					n.c.logger().Warn("holdfast: invalidation stream unheard; hot tier emptied until it is heard again", "namespace", n.name, "unheard", time.Duration(unheard))
				}
			case resumed:
				// Invalidations this process queued during the gap go
				// out now, not at the next ReplayInterval: the other
				// processes hear them only once they are replayed.
				n.replayPending(c.ctx)
				n.dropUnheard()
				n.hotOff.Store(false)
			}
		}
	}
}

// namespaceList returns the Cache's namespaces.
func (c *Cache) namespaceList() []*Namespace {
	c.mu.Lock()
	defer c.mu.Unlock()
	nss := make([]*Namespace, 0, len(c.namespaces))
	for _, ns := range c.namespaces {
		nss = append(nss, ns)
	}
	return nss
}

// invalidatedElsewhere applies another process's invalidation of key, made
// at at by its clock: the hot copy goes, and the key's watermark leaves
// older copies a fallback for a failed load, within the stale-if-error
// window they had, never again served as current.
func (n *Namespace) invalidatedElsewhere(key string, at int64) {
	now := n.exactNow()
	// A clock ahead of this one must not supersede loads made after the
	// announcement was heard.
	at = min(at, now)
	applied := false // a copy held here dropped, or left a fallback
	if n.lkg != nil {
		m := n.lkg.Get(key, now)
		applied = m != nil && m.origin <= at && n.grade(key, m, now) == gradeCurrent
	}
	n.raiseMark(key, watermark{other: at})
	// A flight under way may have read the old value: it must not store it
	// as current (store.go keeps it as a fallback).
	n.flights.invalidate(key)
	n.forgetLoadFailure(key)
	if n.hot != nil && n.hot.Get(key, now) != nil {
		n.hot.Delete(key)
		applied = true
	}
	if applied {
		n.ctr.inc(evInvalidationApplied)
	}
}

// dropUnheard drops the hot copies found current before the stream was
// last heard again: each may have missed an invalidation in the gap.
func (n *Namespace) dropUnheard() {
	now, since := n.exactNow(), n.c.stream.resumedAt.Load()
	var keys []string // Range holds a shard's lock, which Delete takes
	n.hot.Range(now, func(key string, m *meta) bool {
		if m.currentAt() < since {
			keys = append(keys, key)
		}
		return true
	})
	for _, k := range keys {
		n.hot.Delete(k)
	}
	n.ctr.add(evUnheardDropped, uint64(len(keys)))
}

// warmStart fills the hot tier of a namespace that shares hot keys with the
// values of the keys the other processes find hot, so that a process that
// starts while others run does not start cold: at most half the hot tier's
// bytes, within warmStartTime.
func (n *Namespace) warmStart(sharer tier.HotSharer) {
	ctx, cancel := context.WithTimeout(n.c.ctx, warmStartTime)
	defer cancel()
	n.shareHot(ctx, sharer)
	set := n.sharedHot.Load()
	if set == nil || len(set.keys) == 0 {
		return
	}
	keys := make([]string, 0, len(set.keys))
	for k := range set.keys {
		keys = append(keys, k)
	}
	// A copy read before the stream is first heard would be dropped when
	// it is (dropUnheard).
	for n.c.caps.stream != nil && n.c.stream.gap.Load() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(streamCheckEvery):
		}
	}
	budget := n.p.Hot.MaxBytes / 2
	for len(keys) > 0 && budget > 0 && ctx.Err() == nil {
		k := min(len(keys), warmStartBatch)
		batch := keys[:k]
		keys = keys[k:]
		qualified := make([]string, len(batch))
		for i, key := range batch {
			qualified[i] = n.prefix + key
		}
		sent := n.exactNow()
		ls, err := n.c.opts.Shared.GetMany(ctx, qualified)
		if err != nil {
			n.countTierError(err, evSharedError)
			return
		}
		now := n.exactNow()
		for i, l := range ls {
			if l.Err != nil || !l.Found {
				continue
			}
			m, err := decodeMeta(l.Value)
			if err != nil || m.NotFound || now >= m.soft || n.grade(batch[i], &m, now) != gradeCurrent {
				continue
			}
			m.current = sent
			n.putLocal(batch[i], &m, now)
			if n.hot.Get(batch[i], now) != nil {
				n.ctr.inc(evWarmStartKey)
				n.ctr.add(evWarmStartBytes, uint64(len(m.raw)))
				budget -= int64(len(m.raw))
			}
		}
	}
}

// warmStartTime bounds a namespace's warm start.
const warmStartTime = 5 * time.Second

// streamHeard reports whether the Cache has an invalidation stream and
// has heard it since it last broke (and since the Cache began).
func (c *Cache) streamHeard() bool { return c.caps.stream != nil && !c.stream.gap.Load() }
