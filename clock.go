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

// coarseResolution is how often the coarse clock reads the system clock.
// Expiry decisions may be late by up to this much.
const coarseResolution = time.Millisecond

// coarseClock keeps the current time in an atomic word, refreshed by one
// goroutine every millisecond. A hot-tier hit must cost tens of nanoseconds,
// and reading the system clock costs about as much again on some virtual
// machines (measured here: 40% of a hit). The refresh goroutine wakes a
// thousand times a second, which costs well under 1% of a core.
type coarseClock struct {
	now  atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func startCoarseClock() *coarseClock {
	c := &coarseClock{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(time.Now().UnixNano())
	go c.run()
	return c
}

func (c *coarseClock) run() {
	defer close(c.done)
	t := time.NewTicker(coarseResolution)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			c.now.Store(time.Now().UnixNano())
		case <-c.stop:
			return
		}
	}
}

func (c *coarseClock) close() {
	close(c.stop)
	<-c.done
}
