package local

import (
	"math"
	"testing"
)

// probationOrder is the keys on s's probation queue, head first.
func probationOrder(s *Store[int]) []string {
	var out []string
	for n := s.shards[0].q[probation].head; n != nil; n = n.next {
		out = append(out, n.key)
	}
	return out
}

// A victim that outclasses a candidate by two counts or more turns it away
// and goes to probation's back, so that the next candidate meets the next
// entry; one that wins by less stays at the head.
func TestOutclassedVictimMovesBack(t *testing.T) {
	for _, c := range []struct {
		name  string
		gap   int // the victim's count less the newcomer's one
		moved bool
	}{
		{"by far", 3, true},
		{"by two", 2, true},
		{"narrowly", 1, false},
	} {
		const entries = 20
		s := oneShard(entries)
		s.Seed(1)
		for i := range entries {
			s.Set(key(i), i, 100, 1<<62, 0)
		}
		sh := &s.shards[0]
		head := sh.q[probation].head
		if head == nil {
			t.Fatal("a full store has nothing on probation")
		}
		for sh.sketch.count(head.freq, head.freqAt) < 1+c.gap {
			sh.counted(head)
		}
		// A newcomer counted once, whose window overflow meets the head.
		refused := firstRefused(s, 1000, entries)
		if refused < 0 {
			t.Fatalf("%s: no newcomer was refused", c.name)
		}
		if h := s.hash.string(key(refused)); sh.sketch.estimate(h) != 1 {
			t.Fatalf("%s: the refused newcomer counts %d, want the 1 of its Set", c.name, sh.sketch.estimate(h))
		}
		if s.Get(head.key, 0) == nil {
			t.Fatalf("%s: the victim that won was evicted", c.name)
		}
		order := probationOrder(s)
		atHead, atBack := order[0] == head.key, order[len(order)-1] == head.key
		switch {
		case c.moved && !atBack:
			t.Errorf("%s: the victim stayed at position %d of %d on probation, want the back", c.name, index(order, head.key), len(order))
		case !c.moved && !atHead:
			t.Errorf("%s: the victim moved to position %d of %d on probation, want the head", c.name, index(order, head.key), len(order))
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
	}
}

func index(keys []string, k string) int {
	for i, e := range keys {
		if e == k {
			return i
		}
	}
	return -1
}

// capacityOf is a store of a fixed size, for driving a climber alone.
type capacityOf uint64

func (c capacityOf) capacity() uint64     { return uint64(c) }
func (c capacityOf) suspectShift() uint32 { return 1 }
func (c capacityOf) shifted(uint32)       {}

// The climber takes the window no lower than 1% of the bytes, however long
// shrinking it seems to pay.
func TestWindowFloor(t *testing.T) {
	var hits uint64
	c := &climber{hits: func() uint64 { return hits }, step: -climbStep}
	c.window.Store(math.Float64bits(windowPercent / 100.0))
	rate := 0.10
	for range 30 { // samples, each a higher hit rate than the last
		rate = min(rate+0.04, 0.95)
		for range minSample / 64 {
			hits += uint64(64 * rate / (1 - rate))
			for range 64 {
				c.missed(capacityOf(10), false)
			}
		}
	}
	if got := c.share(); got != minWindow {
		t.Fatalf("after samples whose hit rate rose as the window shrank, the window is %.4f of the bytes, want the floor %.4f", got, minWindow)
	}
}
