package local

import (
	"math"
	"sync"
	"sync/atomic"
)

// climber moves a store's window between recency and frequency, as
// Caffeine's hill climber does: after each sample of requests it compares
// the hit rate with the last sample's and keeps moving the window the same
// way while the rate rises, the other way when it falls, in steps that
// shrink as it settles and start again large when the rate jumps. A
// workload whose popular keys keep changing grows the window towards an
// LRU's recency; one of lasting popularity shrinks it, leaving the main
// part to the sketch.
//
// A store does not count its hits, as that would be a write to shared
// memory on every read: the reader that counts them already gives them
// (Store.AdaptWindow). Misses are the new keys set, counted here.
type climber struct {
	hits   func() uint64
	misses atomic.Uint64
	window atomic.Uint64 // the window's share of a shard's bytes, a float64's bits

	mu                     sync.Mutex // the fields below
	startHits, startMisses uint64
	sample                 uint64 // requests a sample
	lastRate, step         float64
	sampled                bool
}

const (
	// Caffeine's hill climber's constants: a first step of 6.25% of the
	// bytes, each next step 0.98 of the last, a jump of 5% in the hit
	// rate starting the steps again.
	climbStep    = 0.0625
	climbDecay   = 0.98
	climbRestart = 0.05
	// maxWindow leaves the main part a fifth of the bytes: a window of
	// all of them would be a CLOCK, and the sketch's judgement lost.
	maxWindow = 0.8
	// minWindow keeps the window at Caffeine's starting share at least.
	// With none, every new key duels for its place as it comes in; on a
	// loop the keys turned away, counted at each miss, then outgrow the
	// keys held, counted only when the policy looks at them, and the
	// two churn: replayed through the store alone over three seeds,
	// bench/cmd/hitratio's loop at 8,192 entries scored 82 to 84% with
	// the window at 0, 86 to 87 with it at 1%.
	minWindow = windowPercent / 100.0
	// minSample is the fewest requests a sample counts, so that a small
	// store's hit rate is measured over enough reads to mean something.
	minSample = 1024
	// samplePerEntry is a sample's requests for each entry the store
	// holds, Caffeine's ten: with one, the climber followed the noise
	// of the hit rate and cost Zipf workloads up to 4 points.
	samplePerEntry = 10
)

// AdaptWindow makes s move its window as the hit rate it sees suggests;
// hits returns how many reads s has answered so far, as its reader counts
// them. Call it before s is used.
func (s *Store[V]) AdaptWindow(hits func() uint64) {
	c := &climber{hits: hits, step: -climbStep}
	c.window.Store(math.Float64bits(windowPercent / 100.0))
	c.startHits = hits()
	s.climb = c
}

// share is the window's share of a shard's bytes now.
func (c *climber) share() float64 { return math.Float64frombits(c.window.Load()) }

// missed counts a new key set in s, and every 64 of them sees whether a
// sample is complete. The caller holds no shard's lock.
func (c *climber) missed(s interface{ capacity() uint64 }) {
	if c.misses.Add(1)&63 != 0 || !c.mu.TryLock() {
		return
	}
	defer c.mu.Unlock()
	h, m := c.hits(), c.misses.Load()
	if c.sample == 0 {
		c.sample = max(minSample, samplePerEntry*s.capacity())
	}
	hits, requests := h-c.startHits, h-c.startHits+m-c.startMisses
	if requests < c.sample {
		return
	}
	rate := float64(hits) / float64(requests)
	change := rate - c.lastRate
	amount := c.step
	if change < 0 {
		amount = -c.step
	}
	// A change within twice the noise of two samples' rates (binomial,
	// of this many requests) is no change: moving on it made the window
	// wander on workloads whose best window does not move, and cost a
	// Zipf workload 1.4 points.
	noise := 2 * math.Sqrt(2*rate*(1-rate)/float64(requests))
	switch {
	case !c.sampled:
		// The first sample has nothing to compare with: it only sets
		// the rate the next is judged by.
		amount, c.sampled = 0, true
	case math.Abs(change) >= climbRestart:
		c.step = math.Copysign(climbStep, amount)
	case math.Abs(change) <= noise:
		amount = 0
	default:
		c.step = climbDecay * amount
	}
	w := math.Float64frombits(c.window.Load()) + amount
	c.window.Store(math.Float64bits(min(max(w, minWindow), maxWindow)))
	c.lastRate, c.startHits, c.startMisses = rate, h, m
	c.sample = max(minSample, samplePerEntry*s.capacity())
}

// capacity is how many entries s holds now: a sample's length.
func (s *Store[V]) capacity() uint64 {
	var n int
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.entries
		sh.mu.Unlock()
	}
	return uint64(n)
}
