package holdfast

import (
	"context"
	"time"
)

// limiter caps concurrent loads. A load that finds no free slot waits a
// bounded time (Options.LoadWait), or none, and is then rejected: a queue in
// front of a saturated database only adds latency to the answer "no". A
// limit below 1 means none (a nil limiter).
type limiter struct {
	slots chan struct{}
	wait  time.Duration
}

func newLimiter(n int, wait time.Duration) *limiter {
	if n <= 0 {
		return nil
	}
	return &limiter{slots: make(chan struct{}, n), wait: wait}
}

// admission is how a load asks for a slot.
type admission int

const (
	// admitWait: the load's readers have nothing else to be served; it
	// waits up to the limiter's wait for a slot.
	admitWait admission = iota
	// admitNow: the readers can be served a stale value instead, so the
	// load takes a free slot or gives up at once rather than make them
	// wait behind a busy source.
	admitNow
	// admitRefresh: a refresh whose readers were served already; it never
	// takes the last quarter of the slots.
	admitRefresh
)

// acquire takes a slot as mode says and reports whether it got one. A nil
// limiter always admits. Only admitWait waits, at most l.wait and never
// past ctx; admitRefresh leaves the last quarter of the slots (rounded
// down) to loads whose readers have nothing else to be served.
func (l *limiter) acquire(ctx context.Context, mode admission) bool {
	if l == nil {
		return true
	}
	if mode == admitRefresh && cap(l.slots)-len(l.slots) <= cap(l.slots)/4 {
		return false
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.wait <= 0 || mode != admitWait {
		return false
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *limiter) release() {
	if l != nil {
		<-l.slots
	}
}

// inUse reports how many slots are taken.
func (l *limiter) inUse() int {
	if l == nil {
		return 0
	}
	return len(l.slots)
}
