// Package local holds the in-process tiers of holdfast: a sharded map of
// values bounded in bytes, with a per-entry expiry and CLOCK (second-chance)
// eviction.
//
// The bound is on the memory an entry really takes, not on its payload: each
// entry is charged its key's bytes, the bytes its value holds (as the caller
// says), its node and its share of the index, each rounded up as the Go
// allocator rounds it (see Cost). For a 16-byte value the node and index
// alone take 184 bytes, many times the value: a store charging its bytes
// plus a guessed 128 once held 1.7 times its budget in live heap.
//
// The same Store serves as the hot tier (small, short-lived, fresh values
// only) and as the last-known-good store (larger, kept until the end of a
// value's stale-if-error window). Both hold encoded bytes rather than decoded
// objects, as large deployments' local caches do, so that a large cache is a few big
// allocations the garbage collector scans quickly, not millions of pointers.
//
// A read takes no lock and writes no shared memory but an entry's referenced
// bit, set the first time it is read after an eviction pass: a key that
// every core reads stays in every core's cache, where a read lock would make
// each read a write to the lock's cache line (a read-locked sharded map took
// ~45 ns a hit here, against ~30 for the sync.Map this package then chose).
// Writes take the lock of the key's shard, which also owns the eviction
// order and byte count.
//
// Each shard indexes its entries in a table of buckets, each a chain of nodes
// linked through a field of their own, which a read follows with atomic
// loads. A key is hashed once: the hash's low bits pick the shard, its top
// bits the bucket, and the node keeps it, so that a read compares hashes
// before keys. A write changes the index
// with one atomic store: a new node goes at its bucket's head, a replacing
// one takes the old one's place in the chain, a removed one is stepped over
// and keeps its link, so that a read walking the chain meanwhile sees it as
// it was before the write or after, and finds a key that was there
// throughout. A table whose entries come to outnumber its buckets gives way
// to one of twice the buckets holding copies of the nodes, the copies taking
// the originals' places in the eviction order: a read that loaded the old
// table, and so began before the new one was published, still walks the old
// chains and needs their links as they were; writers from then on change
// only the new table, which every read that begins after their writes loads.
// Copying costs a grow an allocation an entry, under the shard's lock, which
// the doublings make at most two an entry over a store's filling; chains
// through entries of their own, which a grow could rebuild without touching
// the nodes, would cost every entry an allocation and every read one more
// pointer to follow, for as long as the store lives.
//
// This index replaced a sync.Map (string → node), whose interface hashing
// and comparison took most of a hit, and which took ~150 bytes an entry
// against the index's 8 to 16. Measured here on 2 cores, BenchmarkGet
// alternating the two over 10 runs: a hit through the index took ~16 ns
// against ~22 with 1,024 keys (0.8 of the time; 0.64 on a loaded machine),
// ~140 against ~390 with 65,536 (0.36: fewer cache lines a read); through a
// namespace, a hot-tier hit went from 1.57 to 1.18 times otter's
// GetIfPresent (bench's GetHitRatio, medians of six alternating runs).
// Cache-line buckets of six nodes tagged with a byte of their hashes (as
// otter's map has), and tables half as full, measured no faster.
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
	seed      maphash.Seed
	mask      uint64
	shards    []shard[V]
	nodeBytes int64 // a node[V] as allocated
}

type shard[V any] struct {
	// tab is the shard's index, loaded by every Get without the lock and
	// replaced only under mu, by a grow or a Clear.
	tab atomic.Pointer[table[V]]
	_   [56]byte // keep the writers' fields below off tab's cache line

	mu       sync.Mutex
	entries  int
	clock    list[V] // insertion order; the CLOCK hand is its head
	bytes    int64
	maxBytes int64
	evicted  uint64
	_        [64]byte // keep neighbouring shards' locks off one cache line
}

// table is a shard's index: buckets of chains linked through the nodes'
// hnext. A key's bucket is the top bits of its hash (the shard took the low
// ones). A table's slice is never resized; a grow publishes a new table.
type table[V any] struct {
	shift   uint // bucket of hash h: h >> shift
	buckets []atomic.Pointer[node[V]]
}

// minBuckets is the size of a shard's first table, and of one after Clear.
const minBuckets = 8

func newTable[V any](buckets int) *table[V] {
	return &table[V]{shift: uint(64 - bits.TrailingZeros(uint(buckets))), buckets: make([]atomic.Pointer[node[V]], buckets)}
}

// node is an entry. Everything a Get reads (hash, key, hnext, expires,
// referenced, val) is set before the node is published and never changed
// after, but for hnext and referenced, which are atomic; prev, next and size
// belong to the shard lock.
type node[V any] struct {
	hash       uint64 // the key's maphash, compared before the key
	key        string
	hnext      atomic.Pointer[node[V]] // the next node of the bucket's chain
	expires    int64                   // compared with the now passed to Get; exclusive
	referenced atomic.Bool
	val        V
	size       int64
	prev, next *node[V] // the CLOCK list
}

// New returns a Store whose entries cost at most maxBytes in all (Cost),
// split evenly over its shards. An entry that costs more than one shard's
// share is not stored.
func New[V any](maxBytes int64) *Store[V] {
	return newStore[V](shardCount(), maxBytes)
}

// newStore is New with n shards, a power of two.
func newStore[V any](n int, maxBytes int64) *Store[V] {
	s := &Store[V]{
		seed:      maphash.MakeSeed(),
		mask:      uint64(n - 1),
		shards:    make([]shard[V], n),
		nodeBytes: SizeClass(int(unsafe.Sizeof(node[V]{}))),
	}
	per := maxBytes / int64(n)
	for i := range s.shards {
		s.shards[i].maxBytes = per
		s.shards[i].tab.Store(newTable[V](minBuckets))
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

// locate hashes key once: the low bits pick its shard, the top bits its
// bucket there.
func (s *Store[V]) locate(key string) (uint64, *shard[V]) {
	h := maphash.String(s.seed, key)
	return h, &s.shards[h&s.mask]
}

// Get returns the value stored under key if it has not expired at now, or
// nil. The value is shared: callers must not modify it. A later Set of the
// key stores a new value and leaves this one as it was.
func (s *Store[V]) Get(key string, now int64) *V {
	h, sh := s.locate(key)
	t := sh.tab.Load()
	for n := t.buckets[h>>t.shift].Load(); n != nil; n = n.hnext.Load() {
		if n.hash != h || n.key != key {
			continue
		}
		if now >= n.expires {
			return nil
		}
		// Load before store: a hot key read by every core must not turn
		// each read into a write to the same cache line.
		if !n.referenced.Load() {
			n.referenced.Store(true)
		}
		return &n.val
	}
	return nil
}

// Set stores v under key until expires, replacing any previous value, and
// evicts older entries while the shard is over its byte budget. held is what
// v keeps alive beyond itself: the allocations its slices and pointers
// reference, each rounded with SizeClass (0 for a value with none). It
// reports whether the value was stored.
func (s *Store[V]) Set(key string, v V, held int64, expires int64) bool {
	h, sh := s.locate(key)
	size := s.Cost(key, held)
	if size > sh.maxBytes {
		sh.mu.Lock()
		sh.delete(h, key)
		sh.mu.Unlock()
		return false
	}
	n := &node[V]{hash: h, key: key, val: v, size: size, expires: expires}
	sh.mu.Lock()
	t := sh.tab.Load()
	if link, old := t.find(h, key); old != nil {
		// In place, so that a reader walking the chain meets the old
		// node or the new one, never neither; the old keeps its hnext
		// for a reader standing on it.
		n.hnext.Store(old.hnext.Load())
		link.Store(n)
		sh.drop(old)
	} else {
		head := &t.buckets[h>>t.shift]
		n.hnext.Store(head.Load())
		head.Store(n)
	}
	sh.clock.pushBack(n)
	sh.bytes += size
	sh.entries++
	for sh.bytes > sh.maxBytes {
		sh.evictOne()
	}
	if sh.entries > len(t.buckets) {
		sh.grow(t)
	}
	sh.mu.Unlock()
	return true
}

// Delete removes key.
func (s *Store[V]) Delete(key string) {
	h, sh := s.locate(key)
	sh.mu.Lock()
	sh.delete(h, key)
	sh.mu.Unlock()
}

// Clear removes every entry.
func (s *Store[V]) Clear() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// A reader still on the old table is one that began before
		// this store: it may find what was there, as it could have
		// before the Clear.
		sh.tab.Store(newTable[V](minBuckets))
		sh.clock = list[V]{}
		sh.bytes, sh.entries = 0, 0
		sh.mu.Unlock()
	}
}

// Range calls f with each entry not expired at now, a shard at a time, and
// stops when f returns false. f runs under the shard's lock: it must not
// call the Store. Entries set or removed meanwhile may or may not be seen.
func (s *Store[V]) Range(now int64, f func(key string, v *V) bool) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for n := sh.clock.head; n != nil; n = n.next {
			if n.expires > now && !f(n.key, &n.val) {
				sh.mu.Unlock()
				return
			}
		}
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

// find returns key's node in t and the link that points to it (its bucket,
// or the hnext of the node before it), or nils. The caller holds the
// shard's lock.
func (t *table[V]) find(h uint64, key string) (*atomic.Pointer[node[V]], *node[V]) {
	link := &t.buckets[h>>t.shift]
	for n := link.Load(); n != nil; n = n.hnext.Load() {
		if n.hash == h && n.key == key {
			return link, n
		}
		link = &n.hnext
	}
	return nil, nil
}

// delete removes key's node, if any; the caller holds sh.mu.
func (sh *shard[V]) delete(h uint64, key string) {
	if link, n := sh.tab.Load().find(h, key); n != nil {
		link.Store(n.hnext.Load())
		sh.drop(n)
	}
}

// drop takes n, already out of the index, off the CLOCK list and the byte
// count; the caller holds sh.mu.
func (sh *shard[V]) drop(n *node[V]) {
	sh.clock.remove(n)
	sh.bytes -= n.size
	sh.entries--
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
		sh.delete(n.hash, n.key)
		sh.evicted++
		return
	}
}

// grow publishes a table of twice t's buckets holding copies of t's nodes.
// The nodes are copied, not relinked: a reader that loaded t before the
// publication may still be walking t's chains, and needs each node's hnext
// as it was. The copies take the originals' places in the CLOCK list, so
// writers from now on find and change only the new table; a reader that
// loads the table after this store sees every later write. The caller holds
// sh.mu.
func (sh *shard[V]) grow(t *table[V]) {
	nt := newTable[V](2 * len(t.buckets))
	for n := sh.clock.head; n != nil; {
		c := &node[V]{hash: n.hash, key: n.key, expires: n.expires, val: n.val, size: n.size}
		c.referenced.Store(n.referenced.Load())
		head := &nt.buckets[c.hash>>nt.shift]
		c.hnext.Store(head.Load())
		head.Store(c)
		next := n.next
		sh.clock.replace(n, c)
		n = next
	}
	sh.tab.Store(nt)
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

// replace puts c where n is in the list.
func (l *list[V]) replace(n, c *node[V]) {
	c.prev, c.next = n.prev, n.next
	if n.prev != nil {
		n.prev.next = c
	} else {
		l.head = c
	}
	if n.next != nil {
		n.next.prev = c
	} else {
		l.tail = c
	}
	n.prev, n.next = nil, nil
}
