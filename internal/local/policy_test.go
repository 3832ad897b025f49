package local

import (
	"fmt"
	"testing"
)

// check verifies s's bookkeeping: every indexed node is on the one queue its
// field names, each queue's length and bytes are its nodes', the shard's
// entries and bytes are the queues', and the budget holds.
func (s *Store[V]) check() error {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		err := sh.check()
		sh.mu.Unlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
	}
	return nil
}

func (sh *shard[V]) check() error {
	queued := map[*node[V]]bool{}
	var entries int
	var bytes int64
	for q := range sh.q {
		var n int
		var b int64
		var prev *node[V]
		for e := sh.q[q].head; e != nil; e = e.next {
			if e.prev != prev {
				return fmt.Errorf("queue %d: %q's prev link is wrong", q, e.key)
			}
			if int(e.queue) != q {
				return fmt.Errorf("%q is on queue %d but says %d", e.key, q, e.queue)
			}
			if queued[e] {
				return fmt.Errorf("%q is queued twice", e.key)
			}
			queued[e] = true
			if _, found := sh.tab.Load().find(e.hash, e.key); found != e {
				return fmt.Errorf("queued %q is not the indexed node", e.key)
			}
			n++
			b += e.size
			prev = e
		}
		if sh.q[q].tail != prev {
			return fmt.Errorf("queue %d: the tail is not its last node", q)
		}
		if n != sh.qLen[q] || b != sh.qBytes[q] {
			return fmt.Errorf("queue %d holds %d nodes of %d bytes, counted %d of %d", q, n, b, sh.qLen[q], sh.qBytes[q])
		}
		entries += n
		bytes += b
	}
	indexed := 0
	for i := range sh.tab.Load().buckets {
		for e := sh.tab.Load().buckets[i].Load(); e != nil; e = e.hnext.Load() {
			if !queued[e] {
				return fmt.Errorf("indexed %q is on no queue", e.key)
			}
			indexed++
		}
	}
	switch {
	case indexed != entries:
		return fmt.Errorf("%d nodes indexed, %d queued", indexed, entries)
	case entries != sh.entries || bytes != sh.bytes:
		return fmt.Errorf("%d entries of %d bytes, counted %d of %d", entries, bytes, sh.entries, sh.bytes)
	case bytes > sh.maxBytes:
		return fmt.Errorf("%d bytes over the budget of %d", bytes, sh.maxBytes)
	}
	return nil
}

// oneShard is a store of one shard holding entries entries of keys of
// cost's shape: "k" and 6 digits, a value of 100 bytes.
func oneShard(entries int) *Store[int] {
	s := newStore[int](1, 0)
	s.shards[0].setBudget(int64(entries) * s.Cost("k000000", 100))
	return s
}

func key(i int) string { return fmt.Sprintf("k%06d", i) }

// read is a read through the store as a cache's read does it: a miss is
// set.
func read(s *Store[int], i int) bool {
	if s.Get(key(i), 0) != nil {
		return true
	}
	s.Set(key(i), i, 100, 1<<62, 0)
	return false
}

// A set read often survives a one-off scan of ten times the store's
// entries, none of them read again, which would flush an LRU or a CLOCK.
func TestScanKeepsTheFrequentlyRead(t *testing.T) {
	const entries = 1000
	s := oneShard(entries)
	const frequent = entries / 2
	for range 8 {
		for i := range frequent {
			read(s, i)
		}
	}
	for i := range 10 * entries {
		read(s, 1_000_000+i)
	}
	kept := 0
	for i := range frequent {
		if s.Get(key(i), 0) != nil {
			kept++
		}
	}
	// A few may go: those the window held when the scan began are on
	// probation, unread since, and each meets thousands of scan keys in
	// turn, any of which the sketch's collisions may make look as
	// popular. In 300 runs 490 to 499 stayed; an LRU keeps none.
	if kept < frequent*97/100 {
		t.Errorf("%d of the %d frequently read keys survived the scan, want at least 97%%", kept, frequent)
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// firstRefused sets newcomers from key from on, at most n of them, until
// one is let go at once (Set reports it was not stored), and returns it, or
// -1 when every one was stored.
func firstRefused(s *Store[int], from, n int) int {
	for i := range n {
		if !s.Set(key(from+i), i, 100, 1<<62, 0) {
			return from + i
		}
	}
	return -1
}

// A newcomer less popular than the main part's victim is let go at once
// (Set reports it was not kept), and one missed again and again wins its
// place: each miss counts in the sketch.
func TestNewcomerAdmittedByPopularity(t *testing.T) {
	const entries = 200
	s := oneShard(entries)
	for range 3 {
		for i := range entries {
			read(s, i)
		}
	}
	refused := firstRefused(s, 10_000, entries)
	if refused < 0 {
		t.Fatal("no newcomer was refused by a store of keys read three times each")
	}
	if s.Get(key(refused), 0) != nil {
		t.Fatal("Set reported the newcomer refused, yet it is stored")
	}
	for range 10 {
		read(s, refused)
	}
	if s.Get(key(refused), 0) == nil {
		t.Fatal("a key missed ten times in a row was never admitted")
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// An entry expired at the write's now goes when the policy comes to it,
// however popular it was, and never keeps a newcomer out: the same
// newcomers are refused by the same entries unexpired.
func TestExpiredNeverKeepsANewcomerOut(t *testing.T) {
	const entries = 100
	for _, now := range []int64{0, 100} {
		s := oneShard(entries)
		for i := range entries {
			s.Set(key(i), i, 100, 50, 0) // expire at 50
		}
		for range 10 {
			for i := range entries {
				s.Get(key(i), 0)
			}
		}
		refused := 0
		for i := range entries {
			if !s.Set(key(1000+i), i, 100, 1<<62, now) {
				refused++
			}
		}
		switch {
		case now == 0 && refused == 0:
			t.Fatal("no newcomer was refused by unexpired entries read ten times each")
		case now == 100 && refused > 0:
			t.Fatalf("%d newcomers refused by expired entries", refused)
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
	}
}

// An entry read while on probation is promoted when the policy reaches it,
// and outlives the unread entries that came in after it.
func TestReadOnProbationPromotes(t *testing.T) {
	const entries = 100
	s := oneShard(entries)
	for i := range entries {
		s.Set(key(i), i, 100, 1<<62, 0)
	}
	s.Get(key(0), 0) // the oldest, on probation
	// Newcomers as popular as the victims: each is let go or takes a
	// victim's place, never a read one's.
	for i := range 3 * entries {
		s.Set(key(1000+i), i, 100, 1<<62, 0)
	}
	if s.Get(key(0), 0) == nil {
		t.Fatal("the entry read on probation was evicted")
	}
	if q := s.shards[0].q[protected].head; q == nil || q.key != key(0) {
		t.Fatal("the entry read on probation was not promoted to the protected share")
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// FuzzPolicy runs a sequence of writes, reads, deletes, clock steps and
// shifts of the popular keys against a store of one small shard and a map
// of what was last written:
// a read finds the last value written and unexpired or nothing, and the
// bookkeeping holds after every step.
func FuzzPolicy(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte("a scan, then a loop, then reads of the first keys again and again"))
	f.Add([]byte{0, 1, 0, 2, 3, 1, 3, 1, 7, 254, 3, 2, 7, 253, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := newStore[int](1, 0)
		s.shards[0].setBudget(12 * s.Cost("k000000", 100))
		type want struct {
			v       int
			expires int64
		}
		model := map[string]want{}
		var now int64
		var epoch uint32 // the last suspected shift's
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i], ops[i+1]
			k := key(int(arg % 40))
			switch op % 8 {
			case 0, 1, 2:
				held := int64(arg%4) * 60
				exp := now + 1 + int64(op>>3)*4
				if s.Set(k, i, held, exp, now) {
					model[k] = want{i, exp}
				} else {
					delete(model, k)
				}
			case 3, 4, 5:
				got := s.Get(k, now)
				w, ok := model[k]
				switch {
				case got != nil && !ok:
					t.Fatalf("step %d: %s found %d, never written or deleted since", i, k, *got)
				case got != nil && *got != w.v:
					t.Fatalf("step %d: %s found %d, last written %d", i, k, *got, w.v)
				case got != nil && now >= w.expires:
					t.Fatalf("step %d: %s found after its expiry", i, k)
				}
			case 6:
				s.Delete(k)
				delete(model, k)
			case 7:
				switch arg {
				case 255:
					s.Clear()
					clear(model)
				case 254:
					epoch = s.suspectShift()
				case 253:
					s.shifted(epoch)
				}
				now += int64(arg % 8)
			}
			if err := s.check(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
	})
}

// A sketch grown as its shard fills keeps every key's count.
func TestSketchGrowKeepsCounts(t *testing.T) {
	var sk sketch
	sk.ensure(64)
	for i := range 64 {
		for range i%15 + 1 {
			sk.add(spread(uint64(i)))
		}
	}
	before := make([]int, 64)
	for i := range before {
		before[i] = sk.estimate(spread(uint64(i)))
	}
	sk.ensure(1000)
	for i := range before {
		if got := sk.estimate(spread(uint64(i))); got != before[i] {
			t.Fatalf("key %d: count %d after the grow, %d before", i, got, before[i])
		}
	}
}

// A key's count kept from add is never above its estimate, whatever other
// keys add and however often the sketch halves, and is the estimate while
// no other key shares its counters.
func TestCountNeverAboveEstimate(t *testing.T) {
	var sk sketch
	sk.ensure(64)
	const held = 8
	var freq, at [held]uint8
	counted := func(i int) {
		c := sk.add(spread(uint64(i)))
		freq[i], at[i] = c, sk.halvings
	}
	r := uint64(1)
	for step := range 20 * sk.sample {
		r = spread(r)
		if i := int(r % 64); i < held {
			counted(i)
		} else {
			sk.add(spread(uint64(i)))
		}
		for i := range held {
			if c, e := sk.count(freq[i], at[i]), sk.estimate(spread(uint64(i))); c > e {
				t.Fatalf("step %d: key %d counts %d, above its estimate %d", step, i, c, e)
			}
		}
	}
	if sk.halvings < 10 {
		t.Fatalf("%d halvings, want the test to cross several", sk.halvings)
	}

	var alone sketch
	alone.ensure(64)
	h, other := spread(1), spread(2)
	for alone.block(other) == alone.block(h) {
		other = spread(other)
	}
	c := alone.add(h)
	for range 3 * alone.sample {
		alone.add(other)
		if got, want := alone.count(c, 0), alone.estimate(h); got != want {
			t.Fatalf("after %d halvings the lone key counts %d, its estimate %d", alone.halvings, got, want)
		}
	}
}
