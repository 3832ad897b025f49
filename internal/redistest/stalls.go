package redistest

import (
	"sort"
	"sync"
	"time"
)

// Stalls records when this process's goroutines went unscheduled: Run
// ticks every millisecond, as holdfast's coarse clock does, and notes
// every gap between ticks longer than StallMin. On a starved machine a
// test's bounds on lag and latency must allow for them: holdfast's expiry
// decisions read that coarse clock, and a caught-up replica falls behind
// for as long as the machine leaves it unscheduled.
type Stalls struct {
	mu   sync.Mutex
	gaps [][2]int64 // [last tick before, first tick after], Unix ns
}

// StallMin is the shortest gap Stalls records.
const StallMin = 5 * time.Millisecond

// Run records stalls until stop is closed or hardEnd passes.
func (s *Stalls) Run(stop <-chan struct{}, hardEnd time.Time) {
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	last := time.Now().UnixNano()
	for n := 0; n < 100_000_000; n++ {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		now := time.Now().UnixNano()
		if now-last > int64(StallMin) {
			s.mu.Lock()
			if len(s.gaps) < 1_000_000 {
				s.gaps = append(s.gaps, [2]int64{last, now})
			}
			s.mu.Unlock()
		}
		last = now
		if n%1024 == 0 && time.Now().After(hardEnd) {
			return
		}
	}
}

// overlapping calls fn for each stall that overlaps [from, to]. The gaps
// are in time order, each ending before the next begins.
func (s *Stalls) overlapping(from, to int64, fn func(g [2]int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.gaps), func(i int) bool { return s.gaps[i][1] >= from })
	for ; i < len(s.gaps) && s.gaps[i][0] <= to; i++ {
		fn(s.gaps[i])
	}
}

// Within returns how much of [from, to] (Unix ns) the process spent in
// stalls.
func (s *Stalls) Within(from, to int64) time.Duration {
	var sum int64
	s.overlapping(from, to, func(g [2]int64) {
		if lo, hi := max(g[0], from), min(g[1], to); hi > lo {
			sum += hi - lo
		}
	})
	return time.Duration(sum)
}

// MaxGap returns the longest stall that overlaps [from, to] (Unix ns).
func (s *Stalls) MaxGap(from, to int64) time.Duration {
	var m int64
	s.overlapping(from, to, func(g [2]int64) { m = max(m, g[1]-g[0]) })
	return time.Duration(m)
}

// Gaps returns how many stalls were recorded and the longest.
func (s *Stalls) Gaps() (n int, longest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gaps {
		longest = max(longest, time.Duration(g[1]-g[0]))
	}
	return len(s.gaps), longest
}
