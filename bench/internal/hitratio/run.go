package hitratio

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Mode is how the caches are given the same room.
type Mode int

const (
	// EqualEntries gives every cache room for the same number of entries:
	// holdfast the bytes its store charges for that many (HoldfastEntryCost).
	EqualEntries Mode = iota
	// EqualBytes gives every cache the same memory: holdfast the byte
	// budget, each other cache as many entries as fit in it at the live
	// heap an entry takes it (BytesPerEntry).
	EqualBytes
)

func (m Mode) String() string {
	if m == EqualBytes {
		return "equal bytes"
	}
	return "equal entries"
}

// BeladyName is the column of Belady's optimal policy.
const BeladyName = "belady"

// Config is one comparison: every contender on every workload at every
// capacity.
type Config struct {
	Workloads  []Workload
	Capacities []int // entries
	Contenders []Contender
	ValueBytes int // each value's size; keys are KeyBytes
	Mode       Mode
	// Seed seeds holdfast's hashing (Size.Seed); the other caches
	// here draw theirs, or hash without one.
	Seed     uint64
	Progress io.Writer // a line a replay, or nil
}

// Result is a comparison's hit ratios and what each cache was given.
type Result struct {
	Mode       Mode
	ValueBytes int
	EntryCost  int64    // what holdfast's store charges an entry
	Caches     []string // the contenders' names, then BeladyName
	Sizings    []Sizing // one a capacity, in order
	Rows       []Row    // workload by workload, each capacity in order
}

// Sizing is what each cache was given at one capacity.
type Sizing struct {
	Capacity int
	// Budget is Capacity × EntryCost: holdfast's byte budget in both
	// modes, and every cache's in EqualBytes.
	Budget int64
	// Entries is how many entries each cache was given; for a cache
	// sized in bytes, how many its budget held when filled (Holds). For
	// Belady, the most of any cache: the ceiling for all of them.
	Entries map[string]int
	// BytesPerEntry is the live heap an entry took each cache, measured
	// when filled to Capacity (EqualBytes only; holdfast's when filled to
	// its budget, for comparison with what it charges).
	BytesPerEntry map[string]float64
}

// Row is one workload at one capacity.
type Row struct {
	Workload string
	Capacity int
	Requests int
	HitRatio map[string]float64 // percent, by cache name
}

// Run runs the comparison.
func Run(cfg Config) (*Result, error) {
	if len(cfg.Workloads) == 0 || len(cfg.Capacities) == 0 || len(cfg.Contenders) == 0 {
		return nil, errors.New("hitratio: a comparison needs workloads, capacities and caches")
	}
	cost, err := HoldfastEntryCost(cfg.ValueBytes)
	if err != nil {
		return nil, err
	}
	res := &Result{Mode: cfg.Mode, ValueBytes: cfg.ValueBytes, EntryCost: cost}
	for _, c := range cfg.Contenders {
		res.Caches = append(res.Caches, c.Name)
	}
	res.Caches = append(res.Caches, BeladyName)
	for _, capacity := range cfg.Capacities {
		if capacity <= 0 {
			return nil, fmt.Errorf("hitratio: capacity %d: must be above 0", capacity)
		}
		s, err := size(cfg, capacity, cost)
		if err != nil {
			return nil, err
		}
		res.Sizings = append(res.Sizings, s)
	}
	for _, w := range cfg.Workloads {
		for _, s := range res.Sizings {
			row, err := runRow(cfg, w, s)
			if err != nil {
				return nil, err
			}
			res.Rows = append(res.Rows, row)
		}
	}
	return res, nil
}

// size works out what each cache is given at capacity.
func size(cfg Config, capacity int, cost int64) (Sizing, error) {
	s := Sizing{
		Capacity:      capacity,
		Budget:        int64(capacity) * cost,
		Entries:       map[string]int{},
		BytesPerEntry: map[string]float64{},
	}
	most := 0
	for _, c := range cfg.Contenders {
		var n int
		switch {
		case c.ByBytes && cfg.Mode == EqualBytes:
			bpe, held, err := BytesPerEntry(c, Size{Bytes: s.Budget}, fillFactor*capacity, cfg.ValueBytes)
			if err != nil {
				return s, err
			}
			s.BytesPerEntry[c.Name], n = bpe, held
		case c.ByBytes:
			held, err := Holds(c, Size{Bytes: s.Budget}, capacity, cfg.ValueBytes)
			if err != nil {
				return s, err
			}
			n = held
		case cfg.Mode == EqualBytes:
			bpe, _, err := BytesPerEntry(c, Size{Entries: capacity}, capacity, cfg.ValueBytes)
			if err != nil {
				return s, err
			}
			s.BytesPerEntry[c.Name] = bpe
			n = int(math.Floor(float64(s.Budget) / bpe))
		default:
			n = capacity
		}
		if n <= 0 {
			return s, fmt.Errorf("hitratio: %s gets no entries at capacity %d", c.Name, capacity)
		}
		s.Entries[c.Name] = n
		most = max(most, n)
	}
	s.Entries[BeladyName] = most
	return s, nil
}

func runRow(cfg Config, w Workload, s Sizing) (Row, error) {
	keys := w.Keys(s.Capacity)
	row := Row{Workload: w.Name, Capacity: s.Capacity, Requests: len(keys), HitRatio: map[string]float64{}}
	if len(keys) == 0 {
		return row, fmt.Errorf("hitratio: workload %s has no requests", w.Name)
	}
	for _, con := range cfg.Contenders {
		sz := Size{Entries: s.Entries[con.Name], Seed: cfg.Seed}
		if con.ByBytes {
			sz = Size{Bytes: s.Budget, Seed: cfg.Seed}
		}
		began := time.Now()
		c, err := con.New(sz, cfg.ValueBytes)
		if err != nil {
			return row, fmt.Errorf("hitratio: %s at capacity %d: %w", con.Name, s.Capacity, err)
		}
		hits, err := Replay(c, keys)
		c.Close()
		if err != nil {
			return row, fmt.Errorf("hitratio: %s on %s at capacity %d: %w", con.Name, w.Name, s.Capacity, err)
		}
		row.HitRatio[con.Name] = percent(hits, len(keys))
		progress(cfg.Progress, w.Name, s.Capacity, con.Name, row.HitRatio[con.Name], time.Since(began))
	}
	began := time.Now()
	row.HitRatio[BeladyName] = percent(Belady(keys, s.Entries[BeladyName]), len(keys))
	progress(cfg.Progress, w.Name, s.Capacity, BeladyName, row.HitRatio[BeladyName], time.Since(began))
	return row, nil
}

func progress(w io.Writer, workload string, capacity int, cache string, ratio float64, took time.Duration) {
	if w != nil {
		fmt.Fprintf(w, "%-10s %7d %-10s %6.2f%%  %v\n", workload, capacity, cache, ratio, took.Round(time.Millisecond))
	}
}

func percent(hits, n int) float64 { return 100 * float64(hits) / float64(n) }

// Replay reads keys through c in order and returns the hits. For holdfast
// it also checks that the hot tier answered every hit and nothing else
// held values (see holdfastCache).
func Replay(c Cache, keys []uint64) (int, error) {
	hits := 0
	for _, k := range keys {
		hit, err := c.Access(Key(k))
		if err != nil {
			return hits, err
		}
		if hit {
			hits++
		}
	}
	if h, ok := c.(*holdfastCache); ok {
		return hits, h.check(hits, len(keys))
	}
	return hits, nil
}
