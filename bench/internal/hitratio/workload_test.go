package hitratio

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestWorkloadsAreDeterministic(t *testing.T) {
	const capacity = 100
	a := Synthetic{Requests: 5000, KeySpace: 1 << 12, Seed: 5}
	b := a
	b.Seed = 6
	for _, name := range SyntheticNames {
		wa, err := a.Workload(name)
		if err != nil {
			t.Fatal(err)
		}
		wb, err := b.Workload(name)
		if err != nil {
			t.Fatal(err)
		}
		first, again, other := wa.Keys(capacity), wa.Keys(capacity), wb.Keys(capacity)
		if !slices.Equal(first, again) {
			t.Errorf("%s: two sequences from seed 5 differ", name)
		}
		if name != "loop" && slices.Equal(first, other) {
			t.Errorf("%s: seeds 5 and 6 give the same sequence", name)
		}
	}
}

func TestWorkloadShapes(t *testing.T) {
	const capacity, requests = 100, 11_000
	syn := Synthetic{Requests: requests, KeySpace: 1 << 12, Seed: 1}
	keys := func(name string) []uint64 {
		w, err := syn.Workload(name)
		if err != nil {
			t.Fatal(err)
		}
		return w.Keys(capacity)
	}
	counts := func(ks []uint64) map[uint64]int {
		m := map[uint64]int{}
		for _, k := range ks {
			m[k]++
		}
		return m
	}

	loop := keys("loop")
	if len(loop) != requests || len(counts(loop)) != 110 {
		t.Errorf("loop: %d requests over %d keys, want %d over 110", len(loop), len(counts(loop)), requests)
	}

	scan := keys("scan")
	fresh := 0
	for k, n := range counts(scan) {
		if k >= syn.KeySpace {
			fresh++
			if n != 1 {
				t.Errorf("scan: fresh key %d read %d times, want once", k, n)
			}
		}
	}
	if fresh != scanCount*capacity || len(scan) != requests+scanCount*capacity {
		t.Errorf("scan: %d fresh keys in %d requests, want %d in %d", fresh, len(scan), scanCount*capacity, requests+scanCount*capacity)
	}

	// Each phase of shift has its own hot keys: the most read key of the
	// first phase is rarely read in the second.
	shift := keys("shift")
	per := requests / shiftPhases
	one, two := counts(shift[:per]), counts(shift[per:2*per])
	var hottest uint64
	for k, n := range one {
		if n > one[hottest] {
			hottest = k
		}
	}
	if one[hottest] < 10*two[hottest]+10 {
		t.Errorf("shift: the first phase's hottest key is read %d times in it and %d in the next", one[hottest], two[hottest])
	}

	if _, err := syn.Workload("zipf-x"); err == nil {
		t.Error("zipf-x: no error")
	}
	if _, err := syn.Workload("nope"); err == nil {
		t.Error("nope: no error")
	}
}

// The Zipf sampler's frequencies match the distribution's, below, at and
// above s = 1, where its formulas change regime.
func TestZipfMatchesItsDistribution(t *testing.T) {
	const n, draws = 1000, 200_000
	for _, s := range []float64{0.7, 1.0, 1.1} {
		z := newZipf(rand.New(rand.NewPCG(1, 2)), s, n)
		got := make([]int, n)
		for range draws {
			r := z.next()
			if r >= n {
				t.Fatalf("s=%v: rank %d out of [0, %d)", s, r, n)
			}
			got[r]++
		}
		norm := 0.0
		for k := 1; k <= n; k++ {
			norm += math.Pow(float64(k), -s)
		}
		for _, r := range []int{0, 1, 2, 9, 99, 999} {
			p := math.Pow(float64(r+1), -s) / norm
			sd := math.Sqrt(p * (1 - p) / draws)
			if f := float64(got[r]) / draws; math.Abs(f-p) > 5*sd {
				t.Errorf("s=%v: rank %d drawn %.5f of the time, want %.5f ± %.5f", s, r, f, p, 5*sd)
			}
		}
	}
}
