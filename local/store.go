// Package local holds the in-process tiers of holdfast: a sharded map of
// values bounded in bytes, with a per-entry expiry and CLOCK (second-chance)
// eviction.
//
// The same Store serves as the hot tier (small, short-lived, fresh values
// only) and as the last-known-good store (larger, kept until the end of a
// value's stale-if-error window). Both hold encoded bytes rather than decoded
// objects, as seed 002's local cache does, so that a large cache is a few big
// allocations the garbage collector scans quickly, not millions of pointers.
//
// A read takes a shard's read lock and never writes shared memory except to
// set an entry's referenced bit the first time it is read after an eviction
// pass; so parallel hits on different keys do not contend, and hits on one hot
// key share only a read lock.
package local

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// Store is a concurrent map from string keys to values of type V, bounded by
// the sum of the sizes given to Set. The zero Store is not usable; call New.
type Store[V any] struct {
	seed   maphash.Seed
	mask   uint64
	shards []shard[V]
}

type shard[V any] struct {
	mu       sync.RWMutex
	m        map[string]*node[V]
	clock    list[V] // insertion order; the CLOCK hand is its head
	bytes    int64
	maxBytes int64
	evicted  uint64
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

type node[V any] struct {
	key        string
	val        V
	size       int64
	expires    int64 // compared with the now passed to Get; exclusive
	referenced atomic.Bool
	prev, next *node[V]
}

// New returns a Store that holds at most maxBytes of values (as counted by
// the sizes given to Set), split evenly over its shards. A value larger than
// one shard's share is not stored.
func New[V any](maxBytes int64) *Store[V] {
	n := shardCount()
	s := &Store[V]{seed: maphash.MakeSeed(), mask: uint64(n - 1), shards: make([]shard[V], n)}
	per := maxBytes / int64(n)
	for i := range s.shards {
		s.shards[i].m = make(map[string]*node[V])
		s.shards[i].maxBytes = per
	}
	return s
}

// shardCount is 16 shards per processor, rounded up to a power of two: enough
// that two goroutines rarely want the same shard's lock.
func shardCount() int {
	n := 16 * runtime.GOMAXPROCS(0)
	if n < 16 {
		n = 16
	}
	if n > 1024 {
		n = 1024
	}
	return 1 << bits.Len(uint(n-1))
}

func (s *Store[V]) shard(key string) *shard[V] {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// Get returns the value stored under key if it has not expired at now.
func (s *Store[V]) Get(key string, now int64) (V, bool) {
	sh := s.shard(key)
	sh.mu.RLock()
	n := sh.m[key]
	sh.mu.RUnlock()
	if n == nil || now >= n.expires {
		var zero V
		return zero, false
	}
	// Load before store: a hot key read by every core must not turn each
	// read into a write to the same cache line.
	if !n.referenced.Load() {
		n.referenced.Store(true)
	}
	return n.val, true
}

// Set stores v under key until expires, replacing any previous value, and
// evicts older entries while the shard is over its byte budget. It reports
// whether the value was stored.
func (s *Store[V]) Set(key string, v V, size int64, expires int64) bool {
	sh := s.shard(key)
	if size > sh.maxBytes {
		s.Delete(key)
		return false
	}
	n := &node[V]{key: key, val: v, size: size, expires: expires}
	sh.mu.Lock()
	if old := sh.m[key]; old != nil {
		sh.unlink(old)
	}
	sh.m[key] = n
	sh.clock.pushBack(n)
	sh.bytes += size
	for sh.bytes > sh.maxBytes {
		sh.evictOne()
	}
	sh.mu.Unlock()
	return true
}

// Delete removes key.
func (s *Store[V]) Delete(key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	if n := sh.m[key]; n != nil {
		sh.unlink(n)
	}
	sh.mu.Unlock()
}

// Clear removes every entry.
func (s *Store[V]) Clear() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.m)
		sh.clock = list[V]{}
		sh.bytes = 0
		sh.mu.Unlock()
	}
}

// Stats is a snapshot of a Store's size.
type Stats struct {
	Entries int
	Bytes   int64
	Evicted uint64
}

// Stats returns the current number of entries and bytes, expired entries not
// yet evicted included.
func (s *Store[V]) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		st.Entries += len(sh.m)
		st.Bytes += sh.bytes
		st.Evicted += sh.evicted
		sh.mu.RUnlock()
	}
	return st
}

func (sh *shard[V]) unlink(n *node[V]) {
	delete(sh.m, n.key)
	sh.clock.remove(n)
	sh.bytes -= n.size
}

// evictOne runs the CLOCK hand: an entry read since the hand last passed gets
// a second chance at the back; the first one not read is evicted. Each pass
// clears the bits it skips, so the loop ends within two laps.
func (sh *shard[V]) evictOne() {
	for {
		n := sh.clock.head
		if n == nil {
			return
		}
		if n.referenced.Load() {
			n.referenced.Store(false)
			sh.clock.remove(n)
			sh.clock.pushBack(n)
			continue
		}
		sh.unlink(n)
		sh.evicted++
		return
	}
}

// list is an intrusive doubly linked list of nodes.
type list[V any] struct{ head, tail *node[V] }

func (l *list[V]) pushBack(n *node[V]) {
	n.prev, n.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = n
	} else {
		l.head = n
	}
	l.tail = n
}

func (l *list[V]) remove(n *node[V]) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		l.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = nil, nil
}
