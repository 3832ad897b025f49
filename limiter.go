package holdfast

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// limiter caps concurrent loads. A load that finds no free slot waits a
// bounded time (Options.LoadWait), or none, and is then rejected. A limit
// below 1 means none (a nil limiter).
//
// The wait tells a burst from saturation (Controlled Delay, as in
// Facebook's "Fail at Scale"): while the source keeps up — a load found a
// free slot, or a queue of waiting loads drained into slots, within the
// last LoadWait — a load waits up to LoadWait for its turn, so a burst of
// cold keys (a deploy, a mass invalidation) is loaded rather than refused.
// Once no slot has come free to the queue for LoadWait, the source cannot
// keep up, a queue in front of it only adds latency to the answer "no",
// and new loads wait at most saturatedWait. Measured in the lab with about
// 450 cold loads a second against a source capped at 10 concurrent
// queries: waiting LoadWait throughout took the p99 from 14 ms to 110 ms.
type limiter struct {
	slots chan struct{}
	wait  time.Duration

	// waiting counts loads waiting for a slot; keptUpAt is when the
	// source last kept up (see above), in nanoseconds since start. The
	// waits run on the runtime's timer, so these read the same monotonic
	// clock, not the Cache's Clock.
	waiting  atomic.Int64
	keptUpAt atomic.Int64
	start    time.Time
}

// uncapped is a limit no process reaches: a limiter of it only counts the
// slots in use. Its slots take no memory.
const uncapped = math.MaxInt32

// saturatedWait is the longest a load waits for a slot once none has come
// free to waiting loads for the limiter's whole wait.
const saturatedWait = 10 * time.Millisecond

func newLimiter(n int, wait time.Duration) *limiter {
	if n <= 0 {
		return nil
	}
	return &limiter{slots: make(chan struct{}, n), wait: wait, start: time.Now()}
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
// limiter always admits. Only admitWait waits, at most l.wait (or
// saturatedWait, see limiter) and never past ctx; admitRefresh leaves the
// last quarter of the slots (rounded down) to loads whose readers have
// nothing else to be served.
func (l *limiter) acquire(ctx context.Context, mode admission) bool {
	if l == nil {
		return true
	}
	if mode == admitRefresh && cap(l.slots)-len(l.slots) <= cap(l.slots)/4 {
		return false
	}
	select {
	case l.slots <- struct{}{}:
		l.keptUp()
		return true
	default:
	}
	if l.wait <= 0 || mode != admitWait {
		return false
	}
	l.waiting.Add(1)
	wait := l.wait
	if time.Duration(l.sinceStart()-l.keptUpAt.Load()) >= l.wait {
		wait = min(l.wait, saturatedWait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		if l.waiting.Add(-1) == 0 {
			l.keptUp() // the queue drained into slots
		}
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	l.waiting.Add(-1) // a queue drained by giving up is not kept up with
	return false
}

func (l *limiter) keptUp() { l.keptUpAt.Store(l.sinceStart()) }

func (l *limiter) sinceStart() int64 { return int64(time.Since(l.start)) }

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

// acquire takes a load slot as mode says (see admission): one of the
// namespace's cap, if any, and then one of its reserved slots if one is
// free, else one of the Cache's. It returns the function that gives them
// back, or nil when the load is refused.
func (n *Namespace) acquire(ctx context.Context, mode admission) (release func()) {
	if !n.limit.acquire(ctx, mode) {
		return nil
	}
	if n.reserved != nil && n.reserved.acquire(ctx, mode) {
		return n.releaseReserved
	}
	if !n.c.limit.acquire(ctx, mode) {
		n.limit.release()
		return nil
	}
	return n.release
}

func (n *Namespace) releaseReserved() {
	n.reserved.release()
	n.limit.release()
}

// allCanBeServedStale reports whether every job's readers could be served a
// stale value if its load were refused: then a busy source refuses at once
// instead of making them wait for a slot.
func (n *Namespace) allCanBeServedStale(js []*job) bool {
	now := n.exactNow()
	for _, j := range js {
		if m, _ := n.bestStale(j.key, j.fallback, now, gradeFallback); m == nil {
			return false
		}
	}
	return true
}

func (n *Namespace) release() {
	n.c.limit.release()
	n.limit.release()
}
