// Package hotkey finds the keys read most often, as they are read: a
// sharded Space-Saving summary (Metwally, Agrawal, El Abbadi, ICDT 2005)
// with exponentially decayed counts and sampled updates.
//
// Each shard keeps at most Capacity/Shards candidate keys with their counts
// in a min-heap. A read of a key already there adds to its count; a read of
// a new key, when the shard is full, replaces the key with the smallest
// count and starts from that count (so a new key can never be underestimated,
// which is what makes Space-Saving find every key above its frequency
// threshold in bounded memory).
//
// Counts decay with a half-life, so the summary follows the traffic as it
// changes instead of being reset each minute (counters reset every minute
// miss a key that turns hot just after a reset). Decay is
// "forward": a read at time t adds 2^((t − base)/halfLife) instead of 1, so
// every count shrinks by the same factor as time passes and the heap order
// never needs fixing; the base moves forward, dividing every count, before
// the weights grow large.
//
// Only one read in Sample is recorded, with Sample times the weight, so the
// read path pays a random number most of the time and a shard lock rarely.
// Keys that are read often are recorded often: sampling loses nothing where
// it matters.
package hotkey

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Options configures a Detector. The zero value gives the defaults.
type Options struct {
	// Threshold is the decayed read rate, in reads per second, at or above
	// which a key is hot. Default 1000/60: 1,000 reads a minute.
	Threshold float64
	// HalfLife is how fast old reads stop counting. Default 10 s. A key read
	// at a steady rate r is estimated at r·(1 − 2^(−t/HalfLife)) after t, so
	// a key far above the threshold is found within a small part of it, and
	// one that stops being read falls below the threshold after
	// HalfLife·log2(r/Threshold).
	HalfLife time.Duration
	// Capacity is how many candidate keys are tracked. Default 256: four
	// times the default top-K of 64, so the K hottest are rarely evicted by
	// a burst of cold keys.
	Capacity int
	// TopK bounds how many keys Hot returns. Default 64.
	TopK int
	// Sample records one read in Sample. Default 16.
	Sample int
}

func (o Options) withDefaults() Options {
	if o.Threshold <= 0 {
		o.Threshold = 1000.0 / 60
	}
	if o.HalfLife <= 0 {
		o.HalfLife = 10 * time.Second
	}
	if o.TopK <= 0 {
		o.TopK = 64
	}
	if o.Capacity <= 0 {
		o.Capacity = 4 * o.TopK
	}
	if o.Sample <= 0 {
		o.Sample = 16
	}
	return o
}

const shards = 16

// Detector is safe for concurrent use.
type Detector struct {
	opts   Options
	seed   maphash.Seed
	lambda float64 // ln 2 / half-life, per nanosecond
	per    int     // candidates per shard
	shards [shards]shard
}

type shard struct {
	mu    sync.Mutex
	base  int64 // the time weights are relative to, Unix ns
	heap  []*entry
	index map[string]*entry
	_     [32]byte
}

type entry struct {
	key   string
	count float64 // forward-decayed, relative to the shard's base
	pos   int
}

// New returns a Detector.
func New(opts Options) *Detector {
	o := opts.withDefaults()
	d := &Detector{opts: o, seed: maphash.MakeSeed(), lambda: math.Ln2 / float64(o.HalfLife)}
	per := max(1, o.Capacity/shards)
	d.per = per
	for i := range d.shards {
		d.shards[i].index = make(map[string]*entry, per)
		d.shards[i].heap = make([]*entry, 0, per)
	}
	return d
}

// Record notes one read of key at now (Unix ns). Most calls return after
// drawing a random number. It reports cooled when the read was sampled and
// key's estimated rate, this read included, is below half the threshold:
// a key held because it was hot can be let go then. (Half, so that a key
// read right at the threshold is not dropped and taken back in turn.)
//
// The sampling test is all most reads pay, and its frame is small: the
// rest, in record, has one of near 200 bytes that would otherwise be on
// the stack of every read, and a fresh goroutine's stack is copied when a
// read runs past its first 2 KiB.
func (d *Detector) Record(key string, now int64) (cooled bool) {
	// Uint32 rather than IntN, whose frames are deeper; the modulo's bias
	// is below Sample in 2^32, none for the default 16.
	if d.opts.Sample > 1 && rand.Uint32()%uint32(d.opts.Sample) != 0 {
		return false
	}
	return d.record(key, now)
}

// record is Record of a sampled read.
func (d *Detector) record(key string, now int64) (cooled bool) {
	sh := &d.shards[maphash.String(d.seed, key)%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.base == 0 {
		sh.base = now
	}
	exp := d.lambda * float64(now-sh.base)
	if exp > 60 { // weights near 2^87: move the base forward
		f := math.Exp(-exp)
		for _, e := range sh.heap {
			e.count *= f
		}
		sh.base, exp = now, 0
	}
	w := float64(d.opts.Sample) * math.Exp(exp)
	if e := sh.index[key]; e != nil {
		e.count += w
		sh.down(e.pos)
		return d.rate(sh, e.count, now) < d.opts.Threshold/2
	}
	if len(sh.heap) < d.per {
		e := &entry{key: key, count: w, pos: len(sh.heap)}
		sh.heap = append(sh.heap, e)
		sh.index[key] = e
		sh.up(e.pos)
		return d.rate(sh, e.count, now) < d.opts.Threshold/2
	}
	// Space-Saving: the new key takes the place, and the count, of the
	// least-read candidate.
	e := sh.heap[0]
	delete(sh.index, e.key)
	e.key = key
	e.count += w
	sh.index[key] = e
	sh.down(0)
	return d.rate(sh, e.count, now) < d.opts.Threshold/2
}

// rate turns a stored count into reads per second at now. A steady rate r
// accumulates a decayed count of r/λ.
func (d *Detector) rate(sh *shard, count float64, now int64) float64 {
	return count * math.Exp(-d.lambda*float64(now-sh.base)) * d.lambda * 1e9
}

// IsHot reports whether key's estimated rate at now is at or above the
// threshold.
func (d *Detector) IsHot(key string, now int64) bool {
	sh := &d.shards[maphash.String(d.seed, key)%shards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.index[key]
	return e != nil && d.rate(sh, e.count, now) >= d.opts.Threshold
}

// Key is a hot key and its estimated read rate.
type Key struct {
	Key  string
	Rate float64 // reads per second
}

// Hot returns the hot keys at now, fastest first, at most TopK.
func (d *Detector) Hot(now int64) []Key {
	var out []Key
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		for _, e := range sh.heap {
			if r := d.rate(sh, e.count, now); r >= d.opts.Threshold {
				out = append(out, Key{e.key, r})
			}
		}
		sh.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rate > out[j].Rate })
	if len(out) > d.opts.TopK {
		out = out[:d.opts.TopK]
	}
	return out
}

func (sh *shard) less(i, j int) bool { return sh.heap[i].count < sh.heap[j].count }

func (sh *shard) swap(i, j int) {
	sh.heap[i], sh.heap[j] = sh.heap[j], sh.heap[i]
	sh.heap[i].pos, sh.heap[j].pos = i, j
}

func (sh *shard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !sh.less(i, p) {
			return
		}
		sh.swap(i, p)
		i = p
	}
}

func (sh *shard) down(i int) {
	n := len(sh.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && sh.less(r, l) {
			m = r
		}
		if !sh.less(m, i) {
			return
		}
		sh.swap(i, m)
		i = m
	}
}
