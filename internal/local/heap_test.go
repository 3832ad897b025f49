package local_test

// An external test: memtest reads through package holdfast, which imports
// this package.

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/local"
	"github.com/holdfast-dev/holdfast/internal/memtest"
)

// A Store filled to its budget, and evicting, holds about its budget in live
// heap: the costs Set charges are what the entries take.
func TestCostMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 4 MiB stores")
	}
	const budget = 4 << 20
	for _, size := range []int{0, 16, 512, 16 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			base := memtest.LiveHeap()
			s := local.New[[]byte](budget)
			_, err := memtest.Fill(func(keys []string) error {
				for _, k := range keys {
					v := make([]byte, size)
					s.Set(k, v, local.SizeClass(cap(v)), 1<<62, 0)
				}
				return nil
			}, func() int { return s.Stats().Entries })
			if err != nil {
				t.Fatal(err)
			}
			heap := memtest.LiveHeap() - base
			st := s.Stats()
			runtime.KeepAlive(s)
			cost := s.Cost("q:0000000000", local.SizeClass(size)) // Fill's keys
			ratio := float64(heap) / float64(st.Bytes)
			t.Logf("%d entries of %d bytes: heap/budget %.3f, heap/charged %.3f, fill %.3f", st.Entries, cost, float64(heap)/budget, ratio, float64(st.Bytes)/budget)
			// The heap is within a few percent of the charged cost, short
			// of it by the rounding up of mapEntryBytes.
			if ratio > 1.05 || ratio < 0.85 {
				t.Errorf("live heap is %.3f of the charged bytes, want 0.85 to 1.05", ratio)
			}
			// Each shard is full but for less than one entry.
			if short := budget - st.Bytes; short >= int64(local.Shards(s))*cost {
				t.Errorf("the store holds %d bytes, %d short of its budget: more than one entry a shard", st.Bytes, short)
			}
		})
	}
}

// The index's and the sketch's share of an entry, measured at their worst:
// each shard just past a doubling of its bucket table and of its sketch, the
// store filled and then replaced by evictions. It is at most what Cost
// charges for them (mapEntryBytes and sketchEntryBytes).
func TestIndexBytes(t *testing.T) {
	if testing.Short() || local.RaceEnabled {
		// scripts/test.sh runs it again without the race detector.
		t.Skip("fills stores of up to 18 MiB; the race detector adds nothing to a heap measure but minutes")
	}
	cost := local.New[[]byte](0).Cost("q:0000000000", 0)
	for _, perShard := range []int64{130, 1060, 4240, 8400} { // just past 128, 1024, 4096, 8192
		// The shards a store has depend on its budget: find the count
		// that gives each shard perShard entries.
		shards := int64(1024)
		for {
			n := int64(local.Shards(local.New[[]byte](perShard * shards * cost)))
			if n == shards {
				break
			}
			shards = n
		}
		budget := perShard * shards * cost
		measure := func() float64 {
			base := memtest.LiveHeap()
			s := local.New[[]byte](budget)
			for i := range 2 * budget / cost {
				s.Set(fmt.Sprintf("q:%010d", i), nil, 0, 1<<62, 0)
			}
			heap := memtest.LiveHeap() - base
			st := s.Stats()
			runtime.KeepAlive(s)
			return float64(heap)/float64(st.Entries) - float64(cost-local.MapEntryBytes-local.SketchEntryBytes)
		}
		// An allocation of the runtime's or the test framework's between
		// the two heap reads only ever adds (one run in ten added 5 KiB,
		// 40 bytes an entry of the smallest store), so the least of three
		// measures is the store's.
		shares := measure()
		for range 2 {
			if shares <= local.MapEntryBytes+local.SketchEntryBytes {
				break
			}
			shares = min(shares, measure())
		}
		t.Logf("%d entries a shard, %d shards, %d bytes: the index and the sketch take %.1f bytes an entry", perShard, shards, budget, shares)
		if shares > local.MapEntryBytes+local.SketchEntryBytes {
			t.Errorf("the index and the sketch take %.1f bytes an entry; Cost charges %d", shares, local.MapEntryBytes+local.SketchEntryBytes)
		}
	}
}
