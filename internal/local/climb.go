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
	hits    func() uint64
	misses  atomic.Uint64
	repeats atomic.Uint64 // of the misses, those of keys counted before (repeatCount)
	window  atomic.Uint64 // the window's share of a shard's bytes, a float64's bits

	mu                     sync.Mutex // the fields below
	startHits, startMisses uint64
	sample                 uint64 // requests a sample
	lastRate, step         float64
	sampled                bool

	// The shift detector's (see detect): where its sample began, the
	// hit rate it expects, and the last sample's share of repeat misses.
	dHits, dMisses, dRepeats uint64
	dRef, dRep               float64
	dSample                  uint64 // requests the sample, at least
	dSampled                 bool
	dLow                     int    // samples in a row that looked like a shift
	dEpoch                   uint32 // the epoch the first of them began
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

// adapting is what the climber asks of its store (a Store; a fake in
// tests): its entries, and the marks of a shift of the popular keys.
type adapting interface {
	capacity() uint64
	suspectShift() uint32
	shifted(epoch uint32)
}

// share is the window's share of a shard's bytes now.
func (c *climber) share() float64 { return math.Float64frombits(c.window.Load()) }

// missed counts a new key set in s, repeat if it was counted before, and
// every 64 of them sees whether a sample is complete. The caller holds no
// shard's lock.
func (c *climber) missed(s adapting, repeat bool) {
	if repeat {
		c.repeats.Add(1)
	}
	if c.misses.Add(1)&63 != 0 || !c.mu.TryLock() {
		return
	}
	defer c.mu.Unlock()
	h, m := c.hits(), c.misses.Load()
	if c.sample == 0 {
		c.sample = max(minSample, samplePerEntry*s.capacity())
	}
	c.detect(s, h, m)
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

const (
	// shiftSamplePerEntry is the detector's sample, in requests for each
	// entry held, and shiftMinSample its least: short, so that two in a
	// row see a shift early in a phase of twice the entries; the noise
	// of so short a sample is what shiftNoise and shiftConfirm are for.
	shiftSamplePerEntry = 1.0 / 64
	shiftMinSample      = 512
	// shiftConfirm is how many samples in a row must look like a shift.
	// A one-off scan of fewer keys than a sample's requests looks like
	// one in the sample or two it falls in, and the hit rate is back at
	// the next; a scan longer than a sample takes some sample's rate
	// under shiftFloor, which breaks the row. With one, the scans of
	// bench/cmd/hitratio's scan workload at 512 entries were taken for
	// shifts and cost 0.8 points there.
	shiftConfirm = 2
	// shiftDrop is the least fall of the hit rate below the expected one
	// that is a shift, and shiftNoise the least in standard deviations
	// of the sample's rate.
	shiftDrop, shiftNoise = 0.05, 4
	// shiftRef is the weight of a sample in the expected rate: an average
	// of the last few, as the highest of them stood above the rest by
	// its noise and saw shifts in Zipf workloads that had none.
	shiftRef = 0.25
	// A shift brings misses on keys new or long unread, some of which
	// are read again at once: of the misses, fewer than half are repeats
	// (a loop's are all repeats, and its hit rate wavers by more than
	// shiftDrop between short samples), and not a smaller share than in
	// the sample before, as a scan of keys read once brings.
	shiftRepeats, shiftRepeatFall = 0.5, 0.85
	// shiftFloor: a sample that hits less than a third of the expected
	// rate reads keys nothing has read before, a scan, not a new set of
	// popular keys, which are read again within the sample.
	shiftFloor = 0.33
)

// detect watches for a shift of the popular keys, which the climber, whose
// samples are ten times the entries long, sees too late: where the hit
// rate of shiftConfirm short samples in a row falls well below what the
// ones before had, with the misses' keys as described at shiftRepeats,
// the store marks a shift (Store.shifted) that began at the first of them
// (Store.suspectShift). The caller holds c.mu.
func (c *climber) detect(s adapting, h, m uint64) {
	r := c.repeats.Load()
	hits, misses := h-c.dHits, m-c.dMisses
	if hits+misses < c.dSample {
		return
	}
	// Sized by the entries held when it would end, not when it began:
	// while the store fills, a sample sized at its start is short, and
	// its noise saw a shift in a scan workload that had none. capacity
	// takes every shard's lock, so it is asked only then.
	c.dSample = max(shiftMinSample, uint64(shiftSamplePerEntry*float64(s.capacity())))
	if hits+misses < c.dSample {
		return
	}
	n := float64(hits + misses)
	rate := float64(hits) / n
	repeats := float64(r-c.dRepeats) / float64(max(misses, 1))
	drop := max(shiftDrop, shiftNoise*math.Sqrt(rate*(1-rate)/n))
	switch {
	case !c.dSampled:
		c.dRef, c.dSampled = rate, true
	case rate < c.dRef-drop && rate >= shiftFloor*c.dRef &&
		repeats < shiftRepeats && repeats >= shiftRepeatFall*c.dRep:
		if c.dLow++; c.dLow == 1 {
			c.dEpoch = s.suspectShift()
		}
		if c.dLow >= shiftConfirm {
			s.shifted(c.dEpoch)
			c.dRef, c.dLow = rate, 0
		}
	default:
		c.dRef += shiftRef * (rate - c.dRef)
		c.dLow = 0
	}
	c.dRep = repeats
	c.dHits, c.dMisses, c.dRepeats = h, m, r
}

// suspectShift starts a new epoch in every shard, and returns it: reads
// from now on stamp it, so that a shift confirmed later (shifted) counts
// the keys read since the first sample that looked like one as today's.
func (s *Store[V]) suspectShift() uint32 {
	var e uint32
	for i := range s.shards {
		e = s.shards[i].epoch.Add(1)
	}
	return e
}

// shifted marks a shift of the popular keys that began in epoch: the
// entries neither read nor written since go before any candidate is
// judged (staleVictim). The sketch halves, so that the counts of the keys
// popular before the shift weigh less against the new ones'.
func (s *Store[V]) shifted(epoch uint32) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.shiftAt = epoch
		sh.sketch.halve()
		sh.mu.Unlock()
	}
}
