package holdfast

import (
	"testing"
	"time"
)

// waitFor polls cond until it holds or a second has passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 1 s: not %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoarseClockStopsWhenIdle: with no reads the clock stops ticking and
// reads take the system clock; a run of reads starts it again, and while
// reads keep coming it keeps running and its word stays current.
func TestCoarseClockStopsWhenIdle(t *testing.T) {
	c := startCoarseClock()
	defer c.close()

	waitFor(t, "stopped without reads", c.stopped.Load)
	before := time.Now().UnixNano()
	got := c.load()
	if after := time.Now().UnixNano(); got < before || got > after {
		t.Fatalf("stopped clock: load = %d, want the system clock's, in [%d, %d]", got, before, after)
	}
	// A burst of reads starts it: coarseWakeReads within coarseWakeSpan,
	// which a descheduled reader may miss, so the burst is repeated.
	waitFor(t, "started by bursts of reads", func() bool {
		for range coarseWakeReads {
			c.load()
		}
		return !c.stopped.Load()
	})

	// Reads without pause for several windows: the clock keeps running.
	end := time.Now().Add(8 * coarseWindow * coarseResolution)
	checks, stopped := 0, 0
	for time.Now().Before(end) {
		checks++
		if c.stopped.Load() {
			stopped++
		}
		if lag := time.Now().UnixNano() - c.load(); lag > int64(100*time.Millisecond) {
			t.Fatalf("running clock %v behind the system clock", time.Duration(lag))
		}
	}
	// A loaded machine can starve the reader for a window; most of the
	// time the clock must run.
	if stopped*10 > checks {
		t.Errorf("under steady reads the clock was stopped at %d of %d checks", stopped, checks)
	}

	waitFor(t, "stopped again once reads ended", c.stopped.Load)
}

// TestCoarseClockThinReadsLeaveItStopped: reads too far apart for the clock
// to gain from it, however many, do not start it.
func TestCoarseClockThinReadsLeaveItStopped(t *testing.T) {
	c := startCoarseClock()
	defer c.close()

	waitFor(t, "stopped without reads", c.stopped.Load)
	// Spaced so that no coarseWakeReads of them fit in coarseWakeSpan.
	gap := 2 * coarseWakeSpan / coarseWakeReads
	for range 3 * coarseWakeReads {
		c.load()
		time.Sleep(gap)
	}
	if !c.stopped.Load() {
		t.Fatalf("reads %v apart started the clock", gap)
	}
}

// TestCoarseClockCloseWhileStopped: close ends the goroutine in either state.
func TestCoarseClockCloseWhileStopped(t *testing.T) {
	c := startCoarseClock()
	waitFor(t, "stopped without reads", c.stopped.Load)
	done := make(chan struct{})
	go func() { c.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("close did not return while the clock was stopped")
	}
}
