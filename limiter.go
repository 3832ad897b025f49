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

// acquire takes a slot, waiting at most l.wait (and never past ctx), and
// reports whether it got one. A nil limiter always admits. A refresh never
// waits and never takes the last quarter of the slots (rounded down), which
// are kept for loads whose readers have nothing else to be served.
func (l *limiter) acquire(ctx context.Context, refresh bool) bool {
	if l == nil {
		return true
	}
	if refresh {
		if cap(l.slots)-len(l.slots) <= cap(l.slots)/4 {
			return false
		}
		select {
		case l.slots <- struct{}{}:
			return true
		default:
			return false
		}
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.wait <= 0 {
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
