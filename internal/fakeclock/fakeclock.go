// Package fakeclock is a manually advanced clock for tests of time logic.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a holdfast.Clock that moves only when told to.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a Clock set to start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
