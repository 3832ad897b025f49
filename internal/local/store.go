// Package local holds the in-process tiers of holdfast: a sharded map of
// values bounded in bytes, with a per-entry expiry and W-TinyLFU eviction.
//
// The bound is on the memory an entry really takes, not on its payload: each
// entry is charged its key's bytes, the bytes its value holds (as the caller
// says), its node and its share of the index, each rounded up as the Go
// allocator rounds it (see Cost). For a 16-byte value the node, index and
// frequency sketch alone take about 200 bytes, many times the value: a
// store charging its bytes plus a guessed 128 held 1.7 times its budget in
// live heap.
//
// The same Store serves as the hot tier (small, short-lived, fresh values
// only) and as the last-known-good store (larger, kept until the end of a
// value's stale-if-error window). Both hold encoded bytes rather than decoded
// objects, as large deployments' local caches do, so that a large cache is a few big
// allocations the garbage collector scans quickly, not millions of pointers.
//
// Which entries stay is decided as W-TinyLFU decides it (Einziger, Friedman
// and Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", 2017), the
// policy of Caffeine and otter: a new entry enters a small window (1% of
// the bytes, moved by the hit rate where the store's reader counts its
// hits: see AdaptWindow); one the window lets go must then win its place in
// the main part against the main part's next victim, by being the more
// popular of the two in a sketch that counts reads and misses of every key,
// held or not, and forgets by halves; a victim that outclasses the
// candidate by two counts or more goes to probation's back, so that one
// once popular but read no more does not turn away every newcomer in turn
// (see admitOrEvict). The main part keeps entries read
// again in a protected share (80%), the rest on probation. So a key read
// often survives a scan or a loop of keys read once, which would flush an
// LRU or a CLOCK: in the bench module's hit-ratio comparison this store is
// within half a point of otter, or above it, on Zipf, loop and scan
// workloads, where a CLOCK scored an LRU's (bench/README.md).
//
// A read takes no lock and writes no shared memory but its entry's state
// word: a read bit, set the first time it is read after the policy last
// looked at it, and the shard's shift epoch, stamped at the first read
// after a suspected shift of the popular keys (climber.detect,
// staleVictim): a key that every core reads stays in every core's cache,
// where a read lock would make each read a write to the lock's cache line
// (a read-locked sharded map took ~45 ns a hit here, against ~30 for the
// sync.Map this package then chose). The policy looks at the bit when the
// entry comes up for eviction, as a CLOCK hand would: an entry read since
// is counted once more in the sketch and kept (in the window), promoted
// (on probation) or kept in its share (protected), in place of the reorder
// an LRU does on every read. A count of reads between two looks instead of
// the bit, up to 15, measured the same hit ratios and cost a hit three
// times as much with 65,536 keys (BenchmarkGet), each count a write to a
// line other cores read. Writes take the lock of the key's shard, which
// also owns the eviction order, the sketch and the byte count. A shard is
// at least 1 MiB: the policy of a shard judges only the keys it holds, and
// 32 shards of a few hundred entries each judged worse than one.
//
// A write, a Get that misses and the Set that follows into a full store
// (BenchmarkMissSet), does more than a CLOCK's did: the sketch's
// additions and look-ups and the moves between the queues. Counted by
// valgrind's cachegrind, which a busy machine moves little (GOMAXPROCS=1
// GOGC=off; the count at -test.benchtime 300000x less that at 100000x,
// over 200,000), it takes 982 to 983 instructions a write, the CLOCK
// store 917 to 925 (1.07×), the two counted in turn.
//
// Each shard indexes its entries in a table of buckets, each a chain of nodes
// linked through a field of their own, which a read follows with atomic
// loads. A key is hashed once, with a hash the store seeds itself (see
// hasher): the hash's low bits pick the shard, its top
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
	hash      hasher
	mask      uint64
	shards    []shard[V]
	nodeBytes int64    // a node[V] as allocated
	climb     *climber // nil: the window keeps its 1%
}

// The queues of a shard's policy: every node is on exactly one.
const (
	window    = iota // new entries, until the window's bytes are spent
	probation        // the main part's entries not read since they came in
	protected        // the main part's entries read again
	queues
)

const (
	// windowPercent and protectedPercent are Caffeine's starting shares,
	// which its own simulations found best on most traces: the window 1%
	// of a shard's bytes, the protected share 80% of the rest.
	windowPercent    = 1
	protectedPercent = 80

	// minShardBytes is the least budget a shard gets (see the package
	// comment): a smaller store has fewer shards.
	minShardBytes = 1 << 20
)

type shard[V any] struct {
	// tab is the shard's index, loaded by every Get without the lock and
	// replaced only under mu, by a grow or a Clear.
	tab atomic.Pointer[table[V]]
	// epoch counts the samples that began a suspected shift of the
	// popular keys (Store.suspectShift); a read stamps it on its node.
	// It lies on tab's line, which every read loads anyway and writers
	// change only at a grow, a Clear or a shift.
	epoch atomic.Uint32
	_     [52]byte // keep the writers' fields below off tab's cache line

	mu           sync.Mutex
	shiftAt      uint32 // the epoch the last shift began in; 0 for none
	entries      int
	bytes        int64
	maxBytes     int64
	windowMax    int64 // bytes the window holds before it lets an entry go
	protectedMax int64 // bytes the protected share holds before it demotes one
	q            [queues]list[V]
	qBytes       [queues]int64
	qLen         [queues]int
	sketch       sketch
	rand         uint64 // the xorshift state of admit's random admission
	evicted      uint64
	_            [64]byte // keep neighbouring shards' locks off one cache line
}

// table is a shard's index: buckets of chains linked through the nodes'
// hnext. A key's bucket is the top bits of its hash (the shard took the low
// ones). A table's slice is never resized; a grow publishes a new table.
type table[V any] struct {
	shift   uint // bucket of hash h: h >> shift
	buckets []atomic.Pointer[node[V]]
}

// bucket is the head of hash h's chain. The shift is masked, though it is
// below 64, so that the compiler drops its check for larger shifts: three
// instructions for each look-up.
func (t *table[V]) bucket(h uint64) *atomic.Pointer[node[V]] {
	return &t.buckets[h>>(t.shift&63)]
}

// minBuckets is the size of a shard's first table, and of one after Clear.
const minBuckets = 8

func newTable[V any](buckets int) *table[V] {
	return &table[V]{shift: uint(64 - bits.TrailingZeros(uint(buckets))), buckets: make([]atomic.Pointer[node[V]], buckets)}
}

// node is an entry. Everything a Get reads (hash, key, hnext, expires,
// read, val) is set before the node is published and never changed after,
// but for hnext and read, which are atomic; queue, prev, next and size
// belong to the shard lock.
type node[V any] struct {
	hash    uint64 // the key's hash, compared before the key
	key     string
	hnext   atomic.Pointer[node[V]] // the next node of the bucket's chain
	expires int64                   // compared with the now passed to Get; exclusive
	state   atomic.Uint32           // bit 0: read since the policy last looked; above: the shard's epoch at its last read or its write
	queue   uint8                   // window, probation or protected
	freq    uint8                   // the key's count when last counted (sketch.count)
	freqAt  uint8                   // the sketch's halvings then
	val     V
	size    int64
	prev    *node[V] // the queue's list
	next    *node[V]
}

// New returns a Store whose entries cost at most maxBytes in all (Cost),
// split evenly over its shards. An entry that costs more than one shard's
// share is not stored.
func New[V any](maxBytes int64) *Store[V] {
	return newStore[V](shardCount(maxBytes), maxBytes)
}

// newStore is New with n shards, a power of two.
func newStore[V any](n int, maxBytes int64) *Store[V] {
	s := &Store[V]{
		hash:      randomHasher(),
		mask:      uint64(n - 1),
		shards:    make([]shard[V], n),
		nodeBytes: SizeClass(int(unsafe.Sizeof(node[V]{}))),
	}
	per := maxBytes / int64(n)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.setBudget(per)
		sh.rand = uint64(i)*0x9e3779b97f4a7c15 | 1
		sh.tab.Store(newTable[V](minBuckets))
	}
	return s
}

// Seed makes s hash keys from seed instead of the random seed New drew,
// and so place them, count them and evict them alike in every process
// given the same sequence of calls. Call it before s is used.
func (s *Store[V]) Seed(seed uint64) {
	s.hash = newHasher(seed)
	for i := range s.shards {
		s.shards[i].rand = spread(seed+uint64(i)) | 1
	}
}

// setBudget gives sh max bytes, split between its queues.
func (sh *shard[V]) setBudget(max int64) {
	sh.maxBytes = max
	sh.setWindow(windowPercent / 100.0)
}

// setWindow gives sh's window share of its bytes, the protected share 80%
// of the rest.
func (sh *shard[V]) setWindow(share float64) {
	sh.windowMax = int64(share * float64(sh.maxBytes))
	sh.protectedMax = (sh.maxBytes - sh.windowMax) * protectedPercent / 100
}

// shardCount is 16 shards per processor, rounded up to a power of two:
// enough that two goroutines rarely want the same shard's lock; but fewer,
// halved until each has minShardBytes, in a smaller store.
func shardCount(maxBytes int64) int {
	n := 16 * runtime.GOMAXPROCS(0)
	if n < 16 {
		n = 16
	}
	if n > 1024 {
		n = 1024
	}
	n = 1 << bits.Len(uint(n-1))
	for n > 1 && maxBytes/int64(n) < minShardBytes {
		n >>= 1
	}
	return n
}

// locate hashes key once: the low bits pick its shard, the top bits its
// bucket there.
func (s *Store[V]) locate(key string) (uint64, *shard[V]) {
	h := s.hash.string(key)
	return h, &s.shards[h&s.mask]
}

// Get returns the value stored under key if it has not expired at now, or
// nil. The value is shared: callers must not modify it. A later Set of the
// key stores a new value and leaves this one as it was.
func (s *Store[V]) Get(key string, now int64) *V {
	h, sh := s.locate(key)
	t := sh.tab.Load()
	for n := t.bucket(h).Load(); n != nil; n = n.hnext.Load() {
		if n.hash != h || n.key != key {
			continue
		}
		if now >= n.expires {
			return nil
		}
		// Load before store: a hot key read by every core must not
		// turn each read into a write to the same cache line. The
		// state changes at the first read after a look or a shift.
		if st := sh.epoch.Load()<<1 | 1; n.state.Load() != st {
			n.state.Store(st)
		}
		return &n.val
	}
	return nil
}

// Set stores v under key until expires, replacing any previous value, and
// evicts entries while the shard is over its byte budget, those expired at
// now first. held is what v keeps alive beyond itself: the allocations its
// slices and pointers reference, each rounded with SizeClass (0 for a value
// with none). A new key counts as a use of it: the caller sets what it
// missed. It reports whether the value was stored; a new value may be let
// go at once when the keys it would displace are more popular.
func (s *Store[V]) Set(key string, v V, held, expires, now int64) bool {
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
	q, added := window, true
	if link, old := t.find(h, key); old != nil {
		// In place, so that a reader walking the chain meets the old
		// node or the new one, never neither; the old keeps its hnext
		// for a reader standing on it. The new value keeps the old
		// one's place and reads: a key's popularity is not its value's.
		n.hnext.Store(old.hnext.Load())
		link.Store(n)
		// Its read bit, and the epoch now: written since a shift.
		n.state.Store(old.state.Load()&1 | sh.epoch.Load()<<1)
		n.freq, n.freqAt = old.freq, old.freqAt
		q, added = int(old.queue), false
		sh.drop(old)
	} else {
		head := t.bucket(h)
		n.hnext.Store(head.Load())
		head.Store(n)
		n.state.Store(sh.epoch.Load() << 1)
		sh.counted(n)
	}
	sh.push(n, q)
	sh.bytes += size
	sh.entries++
	if sh.entries > len(sh.sketch.table) {
		// Checked here, as the sketch is sized at its first write and
		// never below the entries: a call on every write costs more.
		sh.sketch.ensure(sh.entries)
	}
	if s.climb != nil {
		sh.setWindow(s.climb.share())
	}
	sh.evict(now)
	if sh.entries > len(t.buckets) {
		sh.grow(t)
	}
	stored := n.queue != evictedQueue
	repeat := n.freq >= repeatCount
	sh.mu.Unlock()
	if added && s.climb != nil {
		s.climb.missed(s, repeat)
	}
	return stored
}

// Delete removes key.
func (s *Store[V]) Delete(key string) {
	h, sh := s.locate(key)
	sh.mu.Lock()
	sh.delete(h, key)
	sh.mu.Unlock()
}

// Clear removes every entry. The sketch keeps what it learnt of the keys'
// popularity, which the entries' values going does not change.
func (s *Store[V]) Clear() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		// A reader still on the old table is one that began before
		// this store: it may find what was there, as it could have
		// before the Clear.
		sh.tab.Store(newTable[V](minBuckets))
		sh.q = [queues]list[V]{}
		sh.qBytes = [queues]int64{}
		sh.qLen = [queues]int{}
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
		for q := range sh.q {
			for n := sh.q[q].head; n != nil; n = n.next {
				if n.expires > now && !f(n.key, &n.val) {
					sh.mu.Unlock()
					return
				}
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
	link := t.bucket(h)
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

// evictedQueue marks a node dropped from the store, for Set to tell a
// value let go at once.
const evictedQueue = queues

// drop takes n, already out of the index, off its queue and the byte
// count; the caller holds sh.mu.
func (sh *shard[V]) drop(n *node[V]) {
	sh.unqueue(n)
	n.queue = evictedQueue
	sh.bytes -= n.size
	sh.entries--
}

// push puts n at the back of queue q.
func (sh *shard[V]) push(n *node[V], q int) {
	n.queue = uint8(q)
	sh.q[q].pushBack(n)
	sh.qBytes[q] += n.size
	sh.qLen[q]++
}

// unqueue takes n off its queue.
func (sh *shard[V]) unqueue(n *node[V]) {
	q := n.queue
	sh.q[q].remove(n)
	sh.qBytes[q] -= n.size
	sh.qLen[q]--
}

// move puts n at the back of queue q.
func (sh *shard[V]) move(n *node[V], q int) {
	sh.unqueue(n)
	sh.push(n, q)
}

// evict restores the shard's budget after a write: the window's overflow
// goes to probation, each entry it lets go competing for its place there
// with the main part's victim while the shard is over its bytes, and
// while it still is the victims go. The caller holds sh.mu.
func (sh *shard[V]) evict(now int64) {
	for sh.qBytes[window] > sh.windowMax {
		// The window's head is most often unread: looked at here, it
		// spares most writes nextUnread's call.
		c := sh.q[window].head
		if !unread(c, now) {
			c = sh.nextUnread(window, now)
		}
		if sh.bytes <= sh.maxBytes || sh.admitOrEvict(c, now) {
			sh.move(c, probation)
		}
	}
	for sh.bytes > sh.maxBytes {
		v := sh.victim(now)
		if v == nil {
			return
		}
		sh.evictNode(v)
	}
}

// admitOrEvict settles candidate c's place, the window's head, while the
// shard is over its budget: against each victim of the main part, the
// less popular goes (Caffeine's evictFromMain, one candidate at a time).
// It reports whether c won its place on probation, where the caller moves
// it: c contests from the window, so that a candidate turned away, most of
// them, is unlinked once rather than moved to probation and unlinked
// there, 60 instructions of a write's 1,100.
func (sh *shard[V]) admitOrEvict(c *node[V], now int64) bool {
	// c meets only the entries that were on probation before it, as it
	// would from probation's back: the ones demoted to probation while
	// the read ones are promoted come after it. Meeting those too let a
	// newcomer in over keys read three times each and counted once.
	older := sh.qLen[probation]
	for sh.bytes > sh.maxBytes {
		// Tested here, not in staleVictim, so that a store that never
		// saw a shift pays no call for it.
		if sh.shiftAt != 0 {
			if v := sh.staleVictim(); v != nil {
				sh.evictNode(v)
				continue
			}
		}
		// probationVictim, its first look written out, as evict's.
		v := sh.q[probation].head
		if older <= 0 || v == nil || !unread(v, now) {
			v = sh.probationVictim(now, &older)
		}
		if v == nil {
			// Probation holds nothing older: c is the main part's
			// least-known entry and goes, as Caffeine's does when
			// candidate and victim are one.
			sh.evictNode(c)
			return false
		}
		switch sh.admit(c, v, now) {
		case admitted:
			sh.evictNode(v)
			older--
			continue
		case outclassed:
			// The victim goes to probation's back, so that the next
			// candidate meets the next entry: one once popular and
			// read no more would otherwise turn every newcomer away
			// from the head until the sketch halves, as a workload
			// whose hot set moves finds (bench/cmd/hitratio's shift
			// gained 1 to 1.7 points at every size). A close win
			// stays: moving those too cost its loop at 32,768
			// entries 2.5 points, the keys held cycling out.
			sh.q[probation].remove(v)
			sh.q[probation].pushBack(v)
		}
		sh.evictNode(c)
		return false
	}
	return true
}

// staleVictim is an entry of the main part neither read nor written since
// the last shift (Store.shifted; the caller checks there was one), found
// at probation's head or among the protected share's first few, or nil.
// After a shift such an entry is yesterday's, its count in the sketch
// earned then: it goes before any candidate is judged, as an LRU would let
// it go, so that the new keys are held from their first read as an LRU
// holds them, not turned away until they have been read more often than
// the old ones were. The protected ones it passes, read since, go to the
// back as an LRU's read entries do.
func (sh *shard[V]) staleVictim() *node[V] {
	if n := sh.q[probation].head; n != nil && sh.stale(n) {
		return n
	}
	l := &sh.q[protected]
	for range staleLooks {
		n := l.head
		if n == nil {
			return nil
		}
		if sh.stale(n) {
			return n
		}
		l.remove(n)
		l.pushBack(n)
	}
	return nil
}

// stale reports whether n was last read or written in an epoch before the
// last shift's: the epochs are 31 bits, compared as serial numbers.
func (sh *shard[V]) stale(n *node[V]) bool {
	return int32((n.state.Load()>>1-sh.shiftAt)<<1) < 0
}

// staleLooks bounds staleVictim's walk of the protected share.
const staleLooks = 4

// repeatCount is the count, its miss included, of a key missed that the
// shift detector takes for one counted before (climber.detect): 2 would
// take in many a key read once, its counters shared with other keys'.
const repeatCount = 3

// The verdicts of admit.
const (
	rejected   = iota // the candidate goes
	outclassed        // the candidate goes, the victim more popular by 2 or more
	admitted          // the victim goes
)

// admit judges candidate c against victim v: v goes if it has expired, or
// if c has not and is the more popular. A candidate as popular as a warm
// victim is admitted one time in 128, Caffeine's defence against keys
// chosen to collide in the sketch with a popular one and so keep every
// newcomer out.
func (sh *shard[V]) admit(c, v *node[V], now int64) int {
	if now >= v.expires {
		return admitted
	}
	if now >= c.expires {
		return rejected
	}
	if c.state.Load()&1 != 0 {
		sh.countRead(c)
	}
	// The counts the nodes keep spare a write the sketch's look-ups. A
	// node's count is its key's estimate less what other keys have added
	// to its counters since it was counted: the candidate's, a window's
	// length ago, is close to it. The victim's can only be higher, which
	// matters where the candidate would win: there its estimate decides,
	// as taking the count there too cost the loop at 32,768 entries half
	// a point of hits (bench/cmd/hitratio, five seeds). Where the victim
	// wins, its count judges whether it outclasses the candidate, at up
	// to a quarter point on Zipf workloads against looking it up for
	// that too, which costs a write 50 instructions more.
	cf, vf := sh.sketch.count(c.freq, c.freqAt), sh.sketch.count(v.freq, v.freqAt)
	if cf > vf {
		vf = sh.sketch.estimate(v.hash)
	}
	if cf > vf {
		return admitted
	}
	if cf >= 6 {
		sh.rand ^= sh.rand << 13
		sh.rand ^= sh.rand >> 7
		sh.rand ^= sh.rand << 17
		if sh.rand&127 == 0 {
			return admitted
		}
	}
	if vf-cf >= 2 {
		return outclassed
	}
	return rejected
}

// victim is the entry to evict when no candidate competes: probation's
// next, then the protected share's, then the window's.
func (sh *shard[V]) victim(now int64) *node[V] {
	// Past two laps (readers reading every entry as it runs), the oldest.
	looks := 2*sh.qLen[probation] + 1
	if v := sh.probationVictim(now, &looks); v != nil {
		return v
	}
	if v := sh.q[probation].head; v != nil {
		return v
	}
	if v := sh.nextUnread(protected, now); v != nil {
		return v
	}
	return sh.nextUnread(window, now)
}

// probationVictim is probation's oldest entry not read since it came in, or
// expired, among the next *looks from its head; the read ones it passes
// are promoted to the protected share, as an LRU's policy promotes them
// when they are read, each taking one of the looks. It returns nil when
// probation is empty or the looks run out.
func (sh *shard[V]) probationVictim(now int64, looks *int) *node[V] {
	for ; *looks > 0; *looks-- {
		n := sh.q[probation].head
		if n == nil || unread(n, now) {
			return n
		}
		sh.countRead(n)
		sh.move(n, protected)
		for sh.qBytes[protected] > sh.protectedMax {
			sh.move(sh.nextUnread(protected, now), probation)
		}
	}
	return nil
}

// nextUnread is queue q's oldest entry not read since the policy last
// looked at it, or expired; the read ones it passes get a second chance at
// the back. It returns nil only for an empty queue; past two laps (readers
// reading every entry as it runs) it takes the oldest.
func (sh *shard[V]) nextUnread(q int, now int64) *node[V] {
	l := &sh.q[q]
	for range 2*sh.qLen[q] + 1 {
		n := l.head
		if n == nil || unread(n, now) {
			return n
		}
		sh.countRead(n)
		l.remove(n)
		l.pushBack(n)
	}
	return l.head
}

// unread is the policy's look at n as it comes up for eviction: n may go
// if it has expired or was not read since the last look. Its caller counts
// a read one once more in the sketch (countRead). Kept apart from
// countRead, so that it inlines in the loops that look: most looks find no
// read, and a call for each cost a write 20 instructions.
func unread[V any](n *node[V], now int64) bool {
	// Load, then store: a read that sets the bit in between is lost, as
	// one read in many may be; a swap would lock the bus for every look.
	return now >= n.expires || n.state.Load()&1 == 0
}

// countRead clears read n's bit for the next look and counts the read in
// the sketch. A read stamping a new epoch in between is lost, as a read
// bit set in between is (unread).
func (sh *shard[V]) countRead(n *node[V]) {
	n.state.Store(n.state.Load() &^ 1)
	sh.counted(n)
}

// counted counts one more use of n's key in the sketch, and keeps the
// key's count in n for admit.
func (sh *shard[V]) counted(n *node[V]) {
	c := sh.sketch.add(n.hash)
	n.freq, n.freqAt = c, sh.sketch.halvings
}

// evictNode removes n from the index and its queue, counted as evicted.
// It finds n's link by the node itself, not its key: the victim's key is
// one more cache line to compare, for every eviction.
func (sh *shard[V]) evictNode(n *node[V]) {
	t := sh.tab.Load()
	link := t.bucket(n.hash)
	for p := link.Load(); p != nil; p = p.hnext.Load() {
		if p == n {
			link.Store(n.hnext.Load())
			break
		}
		link = &p.hnext
	}
	// drop, written out: its call was 10 instructions of every write.
	q := n.queue
	sh.q[q].remove(n)
	sh.qBytes[q] -= n.size
	sh.qLen[q]--
	n.queue = evictedQueue
	sh.bytes -= n.size
	sh.entries--
	sh.evicted++
}

// grow publishes a table of twice t's buckets holding copies of t's nodes.
// The nodes are copied, not relinked: a reader that loaded t before the
// publication may still be walking t's chains, and needs each node's hnext
// as it was. The copies take the originals' places in their queues, so
// writers from now on find and change only the new table; a reader that
// loads the table after this store sees every later write. The caller holds
// sh.mu.
func (sh *shard[V]) grow(t *table[V]) {
	nt := newTable[V](2 * len(t.buckets))
	for q := range sh.q {
		l := &sh.q[q]
		for n := l.head; n != nil; {
			c := &node[V]{hash: n.hash, key: n.key, expires: n.expires, val: n.val, size: n.size, queue: n.queue, freq: n.freq, freqAt: n.freqAt}
			c.state.Store(n.state.Load())
			head := nt.bucket(c.hash)
			c.hnext.Store(head.Load())
			head.Store(c)
			next := n.next
			l.replace(n, c)
			n = next
		}
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
