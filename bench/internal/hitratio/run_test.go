package hitratio

import (
	"slices"
	"testing"
)

// A small equal-bytes comparison end to end: every cache is sized, measured
// and replayed, and none beats the ceiling.
func TestRunEqualBytes(t *testing.T) {
	syn := Synthetic{Requests: 5000, KeySpace: 1 << 12, Seed: 2}
	var ws []Workload
	for _, name := range []string{"zipf-1.1", "loop"} {
		w, err := syn.Workload(name)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	res, err := Run(Config{Workloads: ws, Capacities: []int{128, 512}, Contenders: Contenders(), ValueBytes: testValueBytes, Mode: EqualBytes})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 || len(res.Sizings) != 2 || len(res.Caches) != len(Contenders())+1 {
		t.Fatalf("%d rows, %d sizings, %d caches", len(res.Rows), len(res.Sizings), len(res.Caches))
	}
	for _, s := range res.Sizings {
		most := 0
		for _, con := range Contenders() {
			bpe := s.BytesPerEntry[con.Name]
			// Every cache holds at least the value; ristretto keeps
			// keys' hashes, not the keys.
			if bpe < testValueBytes || bpe > 4096 {
				t.Errorf("capacity %d: %s takes %.0f bytes an entry", s.Capacity, con.Name, bpe)
			}
			// A cache sized in entries gets what fits the budget; holdfast
			// gets the budget itself, and its live heap also holds the
			// Cache's own structures, which weigh on a small store.
			if n := s.Entries[con.Name]; n <= 0 || !con.ByBytes && float64(n)*bpe > float64(s.Budget) {
				t.Errorf("capacity %d: %s given %d entries of %.0f bytes in %d", s.Capacity, con.Name, n, bpe, s.Budget)
			}
			most = max(most, s.Entries[con.Name])
		}
		if s.Entries[BeladyName] != most {
			t.Errorf("capacity %d: Belady given %d entries, the most of any cache is %d", s.Capacity, s.Entries[BeladyName], most)
		}
	}
	for _, row := range res.Rows {
		for _, c := range res.Caches {
			if v := row.HitRatio[c]; v < 0 || v > row.HitRatio[BeladyName] {
				t.Errorf("%s at %d: %s %.2f%%, Belady %.2f%%", row.Workload, row.Capacity, c, v, row.HitRatio[BeladyName])
			}
		}
	}
}

func TestRunRejectsEmptyConfig(t *testing.T) {
	if _, err := Run(Config{}); err == nil {
		t.Error("an empty comparison: no error")
	}
	w := Workload{Name: "one", Keys: func(int) []uint64 { return []uint64{1} }}
	if _, err := Run(Config{Workloads: []Workload{w}, Capacities: []int{0}, Contenders: Contenders()}); err == nil {
		t.Error("capacity 0: no error")
	}
}

// holdfast's replays are the same in every run of a seed, and its seed is
// what decides them: the same reads hit with seed 3 each time, and
// differently with seed 4. The store is of two shards, so the hash picks
// each key's shard as well as its counters in the sketch.
func TestHoldfastSeeded(t *testing.T) {
	z := newZipf(Synthetic{Seed: 1}.rng(9), 0.7, 1<<18)
	keys := make([]uint64, 15_000)
	for i := range keys {
		keys[i] = z.next()
	}
	const capacity = 6400 // 2.1 MiB: two shards of at least 1 MiB
	cost, err := HoldfastEntryCost(testValueBytes)
	if err != nil {
		t.Fatal(err)
	}
	replay := func(seed uint64) []bool {
		c, err := newHoldfast(Size{Bytes: capacity * cost, Seed: seed}, testValueBytes)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hits := make([]bool, len(keys))
		for i, k := range keys {
			if hits[i], err = c.Access(Key(k)); err != nil {
				t.Fatal(err)
			}
		}
		return hits
	}
	first := replay(3)
	if again := replay(3); !slices.Equal(first, again) {
		t.Errorf("two replays with seed 3 hit differently: %d and %d hits", count(first), count(again))
	}
	if other := replay(4); slices.Equal(first, other) {
		t.Errorf("seeds 3 and 4 hit the same %d reads: the seed does not reach the store's hash", count(first))
	}
}

func count(hits []bool) (n int) {
	for _, h := range hits {
		if h {
			n++
		}
	}
	return n
}
