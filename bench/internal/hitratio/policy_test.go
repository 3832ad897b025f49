package hitratio

import (
	"math/rand/v2"
	"testing"
)

const testValueBytes = 64

// loopKeys is requests rounds over keys 0..n-1.
func loopKeys(n, requests int) []uint64 {
	keys := make([]uint64, requests)
	for i := range keys {
		keys[i] = uint64(i % n)
	}
	return keys
}

// build sizes a cache of con for capacity entries as an equal-entries
// comparison does.
func build(t *testing.T, con Contender, capacity int) Cache {
	t.Helper()
	size := Size{Entries: capacity}
	if con.ByBytes {
		cost, err := HoldfastEntryCost(testValueBytes)
		if err != nil {
			t.Fatal(err)
		}
		size = Size{Bytes: int64(capacity) * cost}
	}
	c, err := con.New(size, testValueBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func replay(t *testing.T, c Cache, keys []uint64) int {
	t.Helper()
	hits, err := Replay(c, keys)
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// An LRU cycling over one key more than it holds evicts each key just
// before its next request: no hit at all.
func TestLRULoopLargerThanCache(t *testing.T) {
	const capacity = 500
	c := build(t, Contender{Name: "lru", New: newLRU}, capacity)
	if hits := replay(t, c, loopKeys(capacity+1, 20*capacity)); hits != 0 {
		t.Fatalf("LRU of %d entries on a loop of %d keys: %d hits, want 0", capacity, capacity+1, hits)
	}
}

// Every cache keeps a loop a quarter of its size: the first round misses,
// every later request hits. A quarter, not all of it, so that a sharded
// store's fullest shard (holdfast's split evenly over its shards) still has
// room.
func TestEveryCacheKeepsASmallLoop(t *testing.T) {
	const capacity, loop, requests = 1024, 256, 10 * 1024
	for _, con := range Contenders() {
		t.Run(con.Name, func(t *testing.T) {
			c := build(t, con, capacity)
			if hits := replay(t, c, loopKeys(loop, requests)); hits != requests-loop {
				t.Fatalf("%d hits of %d requests over %d keys in %d entries, want %d", hits, requests, loop, capacity, requests-loop)
			}
		})
	}
}

func TestBeladyLoop(t *testing.T) {
	// On a loop of n keys through a cache of c < n, MIN with bypass keeps
	// the first c keys for good and never admits the others: c hits a
	// round after the first.
	const c, n, rounds = 10, 15, 40
	got := Belady(loopKeys(n, n*rounds), c)
	if want := c * (rounds - 1); got != want {
		t.Fatalf("Belady: %d hits, want %d", got, want)
	}
	if got := Belady(loopKeys(5, 50), 0); got != 0 {
		t.Fatalf("Belady with no room: %d hits", got)
	}
}

// Belady matches an exhaustive search over every admission and eviction
// choice on short random sequences.
func TestBeladyIsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		n := 4 + r.IntN(10)
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(r.IntN(5))
		}
		capacity := 1 + r.IntN(3)
		if got, want := Belady(keys, capacity), bestHits(keys, capacity); got != want {
			t.Fatalf("trial %d: Belady on %v with room for %d: %d hits, exhaustive search %d", trial, keys, capacity, got, want)
		}
	}
}

// bestHits is the most hits any cache of capacity entries can have on keys
// (each below 64): every choice of keeping the requested key or not, and of
// which entry to evict for it.
func bestHits(keys []uint64, capacity int) int {
	memo := map[[2]uint64]int{}
	var best func(i int, held uint64) int
	best = func(i int, held uint64) int {
		if i == len(keys) {
			return 0
		}
		state := [2]uint64{uint64(i), held}
		if v, ok := memo[state]; ok {
			return v
		}
		bit := uint64(1) << keys[i]
		var v int
		if held&bit != 0 {
			v = 1 + best(i+1, held)
		} else {
			v = best(i+1, held) // not kept
			if countBits(held) < capacity {
				v = max(v, best(i+1, held|bit))
			} else {
				for victim := held; victim != 0; victim &= victim - 1 {
					low := victim & -victim
					v = max(v, best(i+1, held&^low|bit))
				}
			}
		}
		memo[state] = v
		return v
	}
	return best(0, 0)
}

func countBits(x uint64) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// Belady is the ceiling: no cache given the same entries hits more, on
// any of the synthetic workloads.
func TestBeladyBoundsEveryCache(t *testing.T) {
	syn := Synthetic{Requests: 20_000, KeySpace: 1 << 14, Seed: 3}
	const capacity = 256
	for _, name := range SyntheticNames {
		w, err := syn.Workload(name)
		if err != nil {
			t.Fatal(err)
		}
		keys := w.Keys(capacity)
		ceiling := Belady(keys, capacity)
		for _, con := range Contenders() {
			hits := replay(t, build(t, con, capacity), keys)
			if hits > ceiling {
				t.Errorf("%s: %s hit %d of %d requests, above Belady's %d", name, con.Name, hits, len(keys), ceiling)
			}
			if hits == 0 && name != "loop" {
				t.Errorf("%s: %s hit nothing", name, con.Name)
			}
		}
	}
}

// The equal-entries budget, capacity × the entry's cost, holds capacity
// entries but for what the store's shards round away: each holds a whole
// number of entries of its share.
func TestHoldfastBudgetHoldsCapacity(t *testing.T) {
	cost, err := HoldfastEntryCost(testValueBytes)
	if err != nil {
		t.Fatal(err)
	}
	hf := Contenders()[0]
	for _, capacity := range []int{1000, 4096} {
		held, err := Holds(hf, Size{Bytes: int64(capacity) * cost}, capacity, testValueBytes)
		if err != nil {
			t.Fatal(err)
		}
		// 32 shards (16 a core on 2 cores) of 1,000/32 entries each hold
		// 31: 992; of 4,096/32, all 4,096.
		if held > capacity || held < capacity-capacity/64 {
			t.Fatalf("a budget of %d × %d bytes holds %d entries, want %d less at most %d", capacity, cost, held, capacity, capacity/64)
		}
		t.Logf("a budget of %d entries × %d bytes holds %d", capacity, cost, held)
	}
}

// The cost read from the store is what its cost function charges: the
// key's and envelope's allocations (40-byte header and value) and the node
// and index beyond them.
func TestHoldfastEntryCostCountsTheEnvelope(t *testing.T) {
	small, err := HoldfastEntryCost(16)
	if err != nil {
		t.Fatal(err)
	}
	large, err := HoldfastEntryCost(1000)
	if err != nil {
		t.Fatal(err)
	}
	// The values differ by 984 bytes; their envelopes, as the allocator
	// rounds them, by 1,088 (64 and 1,152 bytes).
	if d := large - small; d < 984 || d > 1200 {
		t.Fatalf("a 1,000-byte value costs %d bytes more than a 16-byte one, want 984 to 1,200", d)
	}
	if small < 64+KeyBytes {
		t.Fatalf("an entry costs %d bytes, less than its key and envelope", small)
	}
}
