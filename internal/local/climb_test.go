package local

import (
	"math/rand/v2"
	"testing"
)

// replay reads keys through s as a cache does (a miss is set), counting
// the hits for the climber, and returns the hit ratio.
func replay(s *Store[int], hits *uint64, keys []int) float64 {
	before := *hits
	for _, k := range keys {
		if s.Get(key(k), 0) != nil {
			*hits++
		} else {
			s.Set(key(k), k, 100, 1<<62, 0)
		}
	}
	return float64(*hits-before) / float64(len(keys))
}

// A store that adapts (the climber and the shift detector) holds far more
// of a workload whose popular keys keep changing than one whose window
// stays at 1%, and loses nothing on one of lasting popularity, where the
// climber leaves the window small for the sketch. Where a shift's window
// ends depends on the hash seed (0.01 to 0.77 of the bytes over 30
// seeds), as either mechanism may take the shift; the gain does not
// (20 to 30 points over the same seeds), so the gain is what is checked.
func TestWindowFollowsHitRate(t *testing.T) {
	const entries = 1000
	shifting := func() []int {
		// A hot set of 400 keys read uniformly, replaced by keys never
		// read before every 3,000 requests, over a cold spread.
		r := rand.New(rand.NewPCG(1, 1))
		out := make([]int, 0, 600_000)
		for phase := range 200 {
			for range 3000 {
				if r.IntN(10) < 8 {
					out = append(out, 1_000_000*(phase+1)+r.IntN(400))
				} else {
					out = append(out, r.IntN(100_000))
				}
			}
		}
		return out
	}
	lasting := func() []int {
		r := rand.New(rand.NewPCG(2, 2))
		z := rand.NewZipf(r, 1.1, 1, 100_000)
		out := make([]int, 600_000)
		for i := range out {
			out[i] = int(z.Uint64())
		}
		return out
	}
	for _, c := range []struct {
		name               string
		keys               []int
		minShare, maxShare float64
		minGain            float64 // hit ratio points over the 1% window
	}{
		{"shifting", shifting(), minWindow, maxWindow, 10},
		{"lasting", lasting(), minWindow, 0.2, -0.5},
	} {
		var hits uint64
		fixed := replay(oneShard(entries), &hits, c.keys)
		s := oneShard(entries)
		s.AdaptWindow(func() uint64 { return hits })
		adapted := replay(s, &hits, c.keys)
		share := s.climb.share()
		gain := 100 * (adapted - fixed)
		t.Logf("%s: window %.3f of the bytes, hit ratio %.4f against %.4f with 1%%", c.name, share, adapted, fixed)
		if share < c.minShare || share > c.maxShare {
			t.Errorf("%s: the window is %.3f of the bytes, want %.2f to %.2f", c.name, share, c.minShare, c.maxShare)
		}
		if gain < c.minGain {
			t.Errorf("%s: the climber moved the hit ratio %.2f points, want at least %.1f", c.name, gain, c.minGain)
		}
		if err := s.check(); err != nil {
			t.Fatal(err)
		}
	}
}
