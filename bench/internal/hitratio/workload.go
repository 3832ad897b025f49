package hitratio

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// A Workload is a sequence of key requests. Some shapes depend on the cache
// they are run against (a loop slightly larger than the cache), so Keys is
// given the capacity in entries.
type Workload struct {
	Name string
	// Keys returns the request sequence for a cache of capacity entries.
	// The same capacity always gives the same sequence.
	Keys func(capacity int) []uint64
}

// Synthetic sizes the synthetic workloads: how many requests, over how many
// keys, from which seed.
type Synthetic struct {
	Requests int    // Zipf requests a run; default 500,000
	KeySpace uint64 // distinct Zipf keys; default 1<<19, 16 times the largest default capacity
	Seed     uint64 // default 1
}

func (c Synthetic) withDefaults() Synthetic {
	if c.Requests <= 0 {
		c.Requests = 500_000
	}
	if c.KeySpace == 0 {
		c.KeySpace = 1 << 19
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// SyntheticNames are the synthetic workloads' names, in the order Synthetics
// runs them.
var SyntheticNames = []string{"zipf-0.7", "zipf-0.9", "zipf-1.1", "loop", "scan", "shift"}

// scanSkew is the Zipf exponent under the scan and shift workloads: the
// middle of the three, a common web-cache skew.
const scanSkew = 0.9

// Workload returns the synthetic workload called name (SyntheticNames).
func (c Synthetic) Workload(name string) (Workload, error) {
	c = c.withDefaults()
	switch {
	case strings.HasPrefix(name, "zipf-"):
		s, err := strconv.ParseFloat(strings.TrimPrefix(name, "zipf-"), 64)
		if err != nil || s <= 0 {
			return Workload{}, fmt.Errorf("hitratio: workload %q: the Zipf exponent must be a number above 0", name)
		}
		return Workload{name, func(int) []uint64 { return c.zipf(s) }}, nil
	case name == "loop":
		return Workload{name, c.loop}, nil
	case name == "scan":
		return Workload{name, c.scan}, nil
	case name == "shift":
		return Workload{name, c.shift}, nil
	}
	return Workload{}, fmt.Errorf("hitratio: no synthetic workload %q (have %s)", name, strings.Join(SyntheticNames, ", "))
}

// rng is the workload's generator: each workload draws from its own seeded
// stream, so adding one does not change the others.
func (c Synthetic) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(c.Seed, stream))
}

// zipf is Requests draws of Zipf(s) over KeySpace keys; key i has rank i.
func (c Synthetic) zipf(s float64) []uint64 {
	z := newZipf(c.rng(uint64(s*1000)), s, c.KeySpace)
	keys := make([]uint64, c.Requests)
	for i := range keys {
		keys[i] = z.next()
	}
	return keys
}

// loop cycles over 1.1 times the capacity's keys, the shape that defeats
// LRU (every request a miss) while a cache that keeps most of the loop still
// hits.
func (c Synthetic) loop(capacity int) []uint64 {
	n := uint64(capacity + (capacity+9)/10)
	keys := make([]uint64, c.Requests)
	for i := range keys {
		keys[i] = uint64(i) % n
	}
	return keys
}

// scanCount is how many one-off scans the scan workload mixes in, each of
// the capacity's number of fresh keys: 10 times the capacity in all.
const scanCount = 10

// scan is Zipf(0.9) traffic with scanCount scans of fresh keys mixed in at
// even intervals: keys read once and never again (a batch job, a crawler),
// which a cache should not let push out its hot set. The scans add
// 10 × capacity requests to the Zipf ones.
func (c Synthetic) scan(capacity int) []uint64 {
	z := newZipf(c.rng(2), scanSkew, c.KeySpace)
	keys := make([]uint64, 0, c.Requests+scanCount*capacity)
	fresh := c.KeySpace // past every Zipf key
	every := c.Requests / (scanCount + 1)
	for i := range c.Requests {
		if i > 0 && i%every == 0 && i/every <= scanCount {
			for range capacity {
				keys = append(keys, fresh)
				fresh++
			}
		}
		keys = append(keys, z.next())
	}
	return keys
}

// shiftPhases is how many times the shift workload's hot set moves.
const shiftPhases = 8

// shift is Zipf(0.9) whose popular keys change every Requests/shiftPhases
// requests: rank r maps to key (r + phase × KeySpace/shiftPhases) mod
// KeySpace, so each phase's hot keys were cold in the phase before (a
// cache must let go of yesterday's hot set).
func (c Synthetic) shift(int) []uint64 {
	z := newZipf(c.rng(3), scanSkew, c.KeySpace)
	keys := make([]uint64, c.Requests)
	per := max(1, c.Requests/shiftPhases)
	for i := range keys {
		offset := uint64(i/per) * (c.KeySpace / shiftPhases)
		keys[i] = (z.next() + offset) % c.KeySpace
	}
	return keys
}
