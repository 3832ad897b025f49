package holdfast

import (
	"sync/atomic"
	"time"
)

// Clock tells the time. Tests inject a fake one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// coarseResolution is how often the coarse clock reads the system clock
// while it runs. Expiry decisions may be late by up to this much.
const coarseResolution = time.Millisecond

// The clock runs only while reads are frequent enough to gain from it: a
// tick wakes the process, which costs as much as hundreds of reads of the
// system clock, so it pays only at tens of thousands of reads a second.
// Every coarseWindow ticks it stops unless at least coarseBusyTicks of them
// saw a read. While stopped, reads take the system clock themselves (exact,
// and cheap beside a process that reads rarely), and coarseWakeReads such
// reads within coarseWakeSpan start the clock again; reads spread more
// thinly, even a steady few thousand a second, leave it stopped.
const (
	coarseWindow    = 16
	coarseBusyTicks = coarseWindow
	coarseWakeReads = 32
	coarseWakeSpan  = coarseResolution
)

// coarseClock keeps the current time in an atomic word, refreshed by one
// goroutine every millisecond. A hot-tier hit must cost tens of nanoseconds,
// and reading the system clock costs about as much again on some virtual
// machines (measured here: 40% of a hit). A ticker waking a thousand times a
// second is worth that only under a steady stream of reads, so the clock
// stops when reads thin out: an idle or lightly read process pays no
// wake-ups.
type coarseClock struct {
	now atomic.Int64
	// read is set by a read since the last tick; set only when clear, so
	// that the hot path writes the word at most once a tick.
	read atomic.Bool
	// stopped: the goroutine waits on wake and the word is not kept.
	stopped atomic.Bool
	// slow counts the reads taken from the system clock while stopped
	// since slowFrom (Unix nanoseconds), the first of them.
	slow     atomic.Int32
	slowFrom atomic.Int64
	wake     chan struct{}
	stop     chan struct{}
	done     chan struct{}
}

func startCoarseClock() *coarseClock {
	c := &coarseClock{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(time.Now().UnixNano())
	go c.run()
	return c
}

// load returns the time in Unix nanoseconds.
func (c *coarseClock) load() int64 {
	if c.stopped.Load() {
		t := time.Now().UnixNano()
		n := c.slow.Add(1)
		if n == 1 {
			c.slowFrom.Store(t)
		}
		if n >= coarseWakeReads {
			if t-c.slowFrom.Load() > int64(coarseWakeSpan) {
				// Too thin to be worth the ticks: count afresh from
				// this read. Racing reads may lose a count, which
				// only delays the start.
				c.slowFrom.Store(t)
				c.slow.Store(1)
				return t
			}
			// The word first: a read that sees the clock running
			// must find a current time in it.
			c.now.Store(t)
			if !c.stopped.CompareAndSwap(true, false) {
				return t
			}
			select {
			case c.wake <- struct{}{}:
			default:
			}
		}
		return t
	}
	if !c.read.Load() {
		c.read.Store(true)
	}
	return c.now.Load()
}

func (c *coarseClock) run() {
	defer close(c.done)
	t := time.NewTicker(coarseResolution)
	defer t.Stop()
	ticks, busy := 0, 0
	for {
		select {
		case <-t.C:
		case <-c.stop:
			return
		}
		c.now.Store(time.Now().UnixNano())
		if c.read.Swap(false) {
			busy++
		}
		if ticks++; ticks < coarseWindow {
			continue
		}
		if busy >= coarseBusyTicks {
			ticks, busy = 0, 0
			continue
		}
		// Stopped first, so that a read from now on takes the system
		// clock instead of a word no longer kept.
		t.Stop()
		c.slow.Store(0)
		c.stopped.Store(true)
		select {
		case <-c.wake:
		case <-c.stop:
			return
		}
		c.now.Store(time.Now().UnixNano())
		t.Reset(coarseResolution)
		ticks, busy = 0, 0
	}
}

func (c *coarseClock) close() {
	close(c.stop)
	<-c.done
}
