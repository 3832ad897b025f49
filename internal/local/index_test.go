package local

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The index's concurrency tests hold Get to linearizability: a Get that
// begins after a Set or Delete of its key returned sees that write or a later
// one. Each key has one writer, which numbers the key's writes (its steps)
// and publishes a step before writing (begun) and after the write returned
// (done), and counts the key's Deletes; a reader loads done before its Get
// and begun and the count after it. All of these and the Store's own loads
// and stores are sequentially consistent atomics, so a reader that saw begun
// still at done's step overlapped no write of the key, and must see exactly
// done's state; one that saw no Delete begun since a Set that had returned
// must find the key, whatever Sets replaced it meanwhile.

// version is a stored value: the key's index and the step that stored it.
type version struct {
	key  int32
	step uint32
}

// steps is the writers' published state of every key.
type steps struct {
	begun   []atomic.Uint32 // the latest step begun
	deletes []atomic.Uint32 // the Deletes begun
	done    []atomic.Uint64 // the latest step returned <<32 | its deletes <<1 | 1 for a Set
}

func newSteps(keys int) *steps {
	return &steps{begun: make([]atomic.Uint32, keys), deletes: make([]atomic.Uint32, keys), done: make([]atomic.Uint64, keys)}
}

// write is the owner's next write of key i: a Set, or a Delete when del.
// A Set may be refused only by a store that evicts: its policy may let a
// new entry go at once.
func (st *steps) write(s *Store[version], names []string, i int, del, evicting bool) {
	step := st.begun[i].Load() + 1
	st.begun[i].Store(step)
	if del {
		dels := st.deletes[i].Add(1)
		s.Delete(names[i])
		st.done[i].Store(uint64(step)<<32 | uint64(dels)<<1)
		return
	}
	if !s.Set(names[i], version{int32(i), step}, 0, 1<<62, 0) && !evicting {
		panic("a small entry was refused")
	}
	st.done[i].Store(uint64(step)<<32 | uint64(st.deletes[i].Load())<<1 | 1)
}

// read is one checked Get of key i; evicting says entries may leave
// without a Delete.
func (st *steps) read(s *Store[version], names []string, i int, evicting bool) error {
	d := st.done[i].Load()
	v := s.Get(names[i], 0)
	b, dels := st.begun[i].Load(), st.deletes[i].Load()
	step, set := uint32(d>>32), d&1 == 1
	quiet := b == step                  // no write of the key overlapped the Get
	kept := set && dels == uint32(d)>>1 // set before the Get, and no Delete since
	switch {
	case v == nil:
		if kept && !evicting {
			return fmt.Errorf("key %d: set at step %d before the Get began, not deleted since (step %d), not found", i, step, b)
		}
	case int(v.key) != i:
		return fmt.Errorf("key %d: found key %d's value", i, v.key)
	case set && v.step < step:
		return fmt.Errorf("key %d: set at step %d before the Get began, found step %d", i, step, v.step)
	case !set && v.step <= step:
		return fmt.Errorf("key %d: deleted at step %d before the Get began, found step %d", i, step, v.step)
	case v.step > b:
		return fmt.Errorf("key %d: found step %d, not yet begun (%d)", i, v.step, b)
	case quiet && (!set || v.step != step):
		return fmt.Errorf("key %d: no write overlapped the Get, found step %d, want the state of step %d (set %v)", i, v.step, step, set)
	}
	return nil
}

func keyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	return names
}

// hammer runs writers (each owning the keys ≡ its number modulo writers)
// and readers on s. Writers Set their keys in order, with a random write
// after every other, so that the shards grow under reads and writes; then
// they write at random, ops writes each or until limit. Half the random
// writes and half the reads go to 64 hot keys.
func hammer(t *testing.T, s *Store[version], keys, ops int, evicting bool, limit time.Duration) {
	const writers, readers, hot = 2, 4, 64
	names, st := keyNames(keys), newSteps(keys)
	var stop atomic.Bool
	var reads, failures atomic.Int64
	var ww, rw sync.WaitGroup
	for w := range writers {
		ww.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			random := func() {
				i := r.IntN(keys - writers)
				if r.IntN(2) == 0 {
					i = r.IntN(hot)
				}
				st.write(s, names, i-i%writers+w, r.IntN(3) == 0, evicting)
			}
			for i := w; i < keys; i += writers {
				st.write(s, names, i, false, evicting)
				if i%4 == w {
					random()
				}
			}
			deadline := time.Now().Add(limit)
			for n := range ops {
				if n%256 == 0 && time.Now().After(deadline) {
					return
				}
				random()
			}
		})
	}
	for g := range readers {
		rw.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 2))
			for !stop.Load() {
				i := r.IntN(keys)
				if r.IntN(2) == 0 {
					i = r.IntN(hot)
				}
				if err := st.read(s, names, i, evicting); err != nil && failures.Add(1) <= 10 {
					t.Error(err)
				}
				reads.Add(1)
			}
		})
	}
	ww.Wait()
	stop.Store(true)
	rw.Wait()
	// A last pass, quiet: every key in the state its last write left.
	for i := range keys {
		if err := st.read(s, names, i, evicting); err != nil && failures.Add(1) <= 10 {
			t.Error(err)
		}
	}
	t.Logf("%d reads; %+v", reads.Load(), s.Stats())
}

// testShards is the tests' number of shards: few, so that a few thousand
// keys grow each shard's table many times over and the race detector's
// slowness leaves the tests seconds long.
const testShards = 4

// Thousands of keys a shard, written while read, none evicted: every read
// sees the last write that returned before it began, or a later one.
func TestIndexLinearizable(t *testing.T) {
	s := newStore[version](testShards, 1<<40)
	keys := 4096 * testShards
	hammer(t, s, keys, 2*keys, false, time.Second)
	if st := s.Stats(); st.Evicted != 0 {
		t.Fatalf("%d entries evicted: the test needs a store that holds every key", st.Evicted)
	}
	for i := range s.shards {
		if n := len(s.shards[i].tab.Load().buckets); n < 2048 {
			t.Fatalf("shard %d has %d buckets: the test means to grow the tables", i, n)
		}
	}
}

// The same with eviction: an entry may be gone, but a read never sees a
// value older than the last write that returned before it began.
func TestIndexLinearizableEvicting(t *testing.T) {
	keys := 2048 * testShards
	s := newStore[version](testShards, 0)
	for i := range s.shards {
		// A quarter of the keys, about 512 a shard.
		s.shards[i].setBudget(int64(keys/4/testShards) * s.Cost("k0000", 0))
	}
	hammer(t, s, keys, 8*keys, true, time.Second)
	if st := s.Stats(); st.Evicted == 0 {
		t.Fatal("nothing evicted")
	}
}

// Clear under reads, each time the shards' tables back to their first
// size and grown again by a fill: a read that begins after a Clear returned
// finds nothing set before it, and finds a key set since, before the read
// began, with no Clear begun.
func TestIndexClear(t *testing.T) {
	const readers = 4
	s := newStore[version](testShards, 1<<40)
	keys := 2048 * testShards
	names := keyNames(keys)
	deadline := time.Now().Add(1500 * time.Millisecond)
	// progress is the fill: the generation (the Clears done before it
	// began) <<32 | how many keys, in order, it has set.
	var progress atomic.Uint64
	var clearsBegun, clearsDone atomic.Uint32
	var stop atomic.Bool
	var reads, failures atomic.Int64
	var wg sync.WaitGroup
	for g := range readers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for !stop.Load() {
				i := r.IntN(keys)
				cleared, p := clearsDone.Load(), progress.Load()
				v := s.Get(names[i], 0)
				quiet := clearsBegun.Load() == uint32(p>>32)
				var err error
				switch {
				case v == nil:
					if quiet && i < int(uint32(p)) {
						err = fmt.Errorf("key %d set in generation %d before the Get began, not found", i, p>>32)
					}
				case int(v.key) != i:
					err = fmt.Errorf("key %d: found key %d's value", i, v.key)
				case v.step < cleared:
					err = fmt.Errorf("key %d: found generation %d after %d Clears", i, v.step, cleared)
				}
				if err != nil && failures.Add(1) <= 10 {
					t.Error(err)
				}
				reads.Add(1)
			}
		})
	}
	gens := 0
	for gen := uint32(0); gen < 20 && (gen < 3 || time.Now().Before(deadline)); gen++ {
		for i := range keys {
			s.Set(names[i], version{int32(i), gen}, 0, 1<<62, 0)
			progress.Store(uint64(gen)<<32 | uint64(i+1))
		}
		clearsBegun.Store(gen + 1)
		s.Clear()
		clearsDone.Store(gen + 1)
		progress.Store(uint64(gen+1) << 32)
		gens++
	}
	stop.Store(true)
	wg.Wait()
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("after Clear: %+v", st)
	}
	t.Logf("%d generations, %d reads", gens, reads.Load())
}
