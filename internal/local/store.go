// Package local holds the in-process tiers of holdfast: a sharded map of
// values bounded in bytes, with a per-entry expiry and CLOCK (second-chance)
// eviction.
//
// The bound is on the memory an entry really takes, not on its payload: each
// entry is charged its key's bytes, the bytes its value holds (as the caller
// says), its node and its share of the map, each rounded up as the Go
// allocator rounds it (see Cost). For a 16-byte value the node and map
// alone take 296 bytes: a store charging its bytes plus a guessed 128 held
// 1.7 times its budget in live heap.
//
// The same Store serves as the hot tier (small, short-lived, fresh values
// only) and as the last-known-good store (larger, kept until the end of a
// value's stale-if-error window). Both hold encoded bytes rather than decoded
// objects, as large deployments' local caches do, so that a large cache is a few big
// allocations the garbage collector scans quickly, not millions of pointers.
//
// A read takes no lock: entries are found through a sync.Map (lock-free
// loads), and a read writes shared memory only to set an entry's referenced
// bit the first time it is read after an eviction pass. Writes take the lock
// of the key's shard, which also owns the eviction order and byte count.
// Measured here on 2 cores: a sync.Map load ~30 ns against ~45 ns for a
// read-locked sharded map.
package local

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Store is a concurrent map from string keys to values of type V, bounded by
// the sum of its entries' costs (Cost). The zero Store is not usable; call
// New.
type Store[V any] struct {
	m         sync.Map // string → *node[V]; changed only under the key's shard lock
	seed      maphash.Seed
	mask      uint64
	shards    []shard[V]
	nodeBytes int64 // a node[V] as allocated
}

type shard[V any] struct {
	mu       sync.Mutex
	entries  int
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

// New returns a Store whose entries cost at most maxBytes in all (Cost),
// split evenly over its shards. An entry that costs more than one shard's
// share is not stored.
func New[V any](maxBytes int64) *Store[V] {
	n := shardCount()
	s := &Store[V]{
		seed:      maphash.MakeSeed(),
		mask:      uint64(n - 1),
		shards:    make([]shard[V], n),
		nodeBytes: SizeClass(int(unsafe.Sizeof(node[V]{}))),
	}
	per := maxBytes / int64(n)
	for i := range s.shards {
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

// Get returns the value stored under key if it has not expired at now, or
// nil. The value is shared: callers must not modify it. A later Set of the
// key stores a new value and leaves this one as it was.
func (s *Store[V]) Get(key string, now int64) *V {
	v, ok := s.m.Load(key)
	if !ok {
		return nil
	}
	n := v.(*node[V])
	if now >= n.expires {
		return nil
	}
	// Load before store: a hot key read by every core must not turn each
	// read into a write to the same cache line.
	if !n.referenced.Load() {
		n.referenced.Store(true)
	}
	return &n.val
}

// Set stores v under key until expires, replacing any previous value, and
// evicts older entries while the shard is over its byte budget. held is what
// v keeps alive beyond itself: the allocations its slices and pointers
// reference, each rounded with SizeClass (0 for a value with none). It
// reports whether the value was stored.
func (s *Store[V]) Set(key string, v V, held int64, expires int64) bool {
	sh := s.shard(key)
	size := s.Cost(key, held)
	if size > sh.maxBytes {
		s.Delete(key)
		return false
	}
	n := &node[V]{key: key, val: v, size: size, expires: expires}
	sh.mu.Lock()
	if old, ok := s.m.Load(key); ok {
		s.unlink(sh, old.(*node[V]))
	}
	s.m.Store(key, n)
	sh.clock.pushBack(n)
	sh.bytes += size
	sh.entries++
	for sh.bytes > sh.maxBytes {
		s.evictOne(sh)
	}
	sh.mu.Unlock()
	return true
}

// Delete removes key.
func (s *Store[V]) Delete(key string) {
	sh := s.shard(key)
	sh.mu.Lock()
	if n, ok := s.m.Load(key); ok {
		s.unlink(sh, n.(*node[V]))
	}
	sh.mu.Unlock()
}

// Clear removes every entry.
func (s *Store[V]) Clear() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for n := sh.clock.head; n != nil; n = n.next {
			s.m.Delete(n.key)
		}
		sh.clock = list[V]{}
		sh.bytes, sh.entries = 0, 0
		sh.mu.Unlock()
	}
}

// Stats is a snapshot of a Store's size.
type Stats struct {
	Entries int
	Bytes   int64 // the sum of the entries' costs
	Evicted uint64
}

// Stats returns the current number of entries and bytes, expired entries not
// yet evicted included.
func (s *Store[V]) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += sh.entries
		st.Bytes += sh.bytes
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}

// unlink removes n; the caller holds sh.mu.
func (s *Store[V]) unlink(sh *shard[V], n *node[V]) {
	s.m.Delete(n.key)
	sh.clock.remove(n)
	sh.bytes -= n.size
	sh.entries--
}

// evictOne runs the CLOCK hand: an entry read since the hand last passed gets
// a second chance at the back; the first one not read is evicted. Each pass
// clears the bits it skips, so the loop ends within two laps.
func (s *Store[V]) evictOne(sh *shard[V]) {
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
		s.unlink(sh, n)
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
