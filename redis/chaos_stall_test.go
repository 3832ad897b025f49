package redis_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"
)

// chaosStallDumps is how many goroutine dumps one run writes at most.
const chaosStallDumps = 3

// chaosStallWatch watches the reads in progress and, when one has taken
// longer than after, writes every goroutine's stack to a file while it still
// waits: a read that stalls for seconds on a healthy cluster is rare and
// timing-dependent, and what it waits on is gone once it returns. The dumps
// go to os.TempDir (they outlive the test's own directory) and their paths
// are logged. HOLDFAST_CHAOS_STALL sets after (default 2s; 0 turns it off).
// Reads that began while the database was slow or failing, or in the
// chaosSettle after, are not dumped: they may wait for a load, and the few
// dumps a run writes are kept for a stall the checker would not excuse.
type chaosStallWatch struct {
	after time.Duration
	db    *chaosDB
	// begun is each reader slot's read in progress: its start in Unix
	// nanoseconds and its key, or 0 while the slot is between reads.
	begun []atomic.Int64
	keys  []atomic.Int32
	seed  uint64
	rel   func(int64) string // a time as the test's log gives it
	dumps []string           // written by run, read after it returns
}

func newChaosStallWatch(db *chaosDB, sched *chaosScheduler, slots int, seed uint64) (*chaosStallWatch, error) {
	after := 2 * time.Second
	if s := os.Getenv("HOLDFAST_CHAOS_STALL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("HOLDFAST_CHAOS_STALL: %w", err)
		}
		after = d
	}
	return &chaosStallWatch{after: after, db: db, begun: make([]atomic.Int64, slots), keys: make([]atomic.Int32, slots), seed: seed, rel: sched.rel}, nil
}

// begin and end bracket slot's read of key.
func (w *chaosStallWatch) begin(slot, key int) {
	w.keys[slot].Store(int32(key))
	w.begun[slot].Store(time.Now().UnixNano())
}

func (w *chaosStallWatch) end(slot int) { w.begun[slot].Store(0) }

// run checks the slots every 50 ms until stop or hardEnd, and dumps the
// goroutines for a read found past after, up to chaosStallDumps. A dump
// lists the other reads waiting then; none of them is dumped again, so that
// one stall of many readers takes one dump.
func (w *chaosStallWatch) run(stop <-chan struct{}, hardEnd time.Time) error {
	if w.after <= 0 {
		return nil
	}
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	dumped := make([]int64, len(w.begun)) // the start of the read last dumped or listed, per slot
	var dbFault int64                     // when the database was last seen in a fault
	for len(w.dumps) < chaosStallDumps && time.Now().Before(hardEnd) {
		select {
		case <-stop:
			return nil
		case <-tk.C:
		}
		now := time.Now().UnixNano()
		if w.db.mode.Load() != chaosDBNormal {
			dbFault = now
			continue
		}
		for slot := range w.begun {
			b := w.begun[slot].Load()
			if b == 0 || b == dumped[slot] || time.Duration(now-b) < w.after || b <= dbFault+int64(chaosSettle) {
				continue
			}
			path := filepath.Join(os.TempDir(), fmt.Sprintf("holdfast-chaos-stall-%d-%d.txt", w.seed, len(w.dumps)+1))
			if err := w.dump(path, slot, b, now); err != nil {
				return err
			}
			w.dumps = append(w.dumps, path)
			for s := range w.begun {
				dumped[s] = w.begun[s].Load()
			}
			break
		}
	}
	return nil
}

func (w *chaosStallWatch) dump(path string, slot int, begun, now int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "reader slot %d (process %d), key %s: read began at %s, still waiting at %s (%v)\n",
		slot, slot/chaosReaders, chaosKeyName(int(w.keys[slot].Load())), w.rel(begun), w.rel(now), time.Duration(now-begun).Round(time.Millisecond))
	for s := range w.begun {
		if b := w.begun[s].Load(); b != 0 && s != slot {
			fmt.Fprintf(f, "  also waiting: slot %d (process %d), key %s, since %s\n", s, s/chaosReaders, chaosKeyName(int(w.keys[s].Load())), w.rel(b))
		}
	}
	fmt.Fprintln(f)
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
