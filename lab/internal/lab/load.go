package lab

import (
	"context"
	"sort"
	"sync"
	"time"
)

// An open-model load generator: requests start at times fixed in advance,
// whatever earlier requests are doing, like k6's constant-arrival-rate
// executor. A closed model (N workers in a loop) would slow down exactly when
// the system under test slows down, and hide the tail a real outage shows.

// Request is one scheduled call: its start offset from the run's start and
// the key it reads.
type Request struct {
	At  time.Duration
	Key string
}

// ConstantRate returns the schedule of rate requests per second for d, the
// i-th at i/rate, with keys chosen by key(i). It is bounded: at most
// rate×d requests.
func ConstantRate(rate float64, d time.Duration, key func(i int) string) []Request {
	if rate <= 0 || d <= 0 {
		return nil
	}
	interval := time.Duration(float64(time.Second) / rate)
	n := int(d / interval)
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{At: time.Duration(i) * interval, Key: key(i)}
	}
	return out
}

// sortSlice orders a schedule merged from several by start time, keeping
// the order of requests due at the same time.
func sortSlice(s []Request) {
	sort.SliceStable(s, func(i, j int) bool { return s[i].At < s[j].At })
}

// Driver runs a schedule.
type Driver struct {
	// MaxInFlight bounds the requests running at once. A request due while
	// the bound is reached is not started: it is reported to Handle as
	// dropped (the sender never waits, which would turn the open model into
	// a closed one). Zero means 10,000.
	MaxInFlight int
	// Grace is how long in-flight requests may run after the last one was
	// started before their context is cancelled. Zero means 10 s.
	Grace time.Duration
}

// Handle is called once per scheduled request, in its own goroutine, with
// the request's index; dropped is true (and Handle runs on the sender's
// goroutine, so it must return at once) when there was no capacity for it.
// late is how far behind its scheduled time the request was started.
type Handle func(ctx context.Context, i int, late time.Duration, dropped bool)

// Run starts each request of sched at start+At and returns when every started
// request has returned. It stops starting requests when ctx is done; requests
// not started then are not reported. It returns the number of requests
// started and dropped.
func (d Driver) Run(ctx context.Context, start time.Time, sched []Request, h Handle) (started, dropped int) {
	maxIn := d.MaxInFlight
	if maxIn <= 0 {
		maxIn = 10000
	}
	grace := d.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	// Requests get their own context so the drain grace can cut them off
	// without cancelling the caller's ctx; it is also cancelled with ctx.
	reqCtx, cancelReqs := context.WithCancel(ctx)
	defer cancelReqs()

	sem := make(chan struct{}, maxIn)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C

sending:
	for i, r := range sched {
		due := start.Add(r.At)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break sending
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			break sending
		}
		late := max(time.Since(due), 0)
		select {
		case sem <- struct{}{}:
			started++
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				h(reqCtx, i, late, false)
			}()
		default:
			dropped++
			h(reqCtx, i, late, true)
		}
	}

	// Drain: wait for the in-flight requests, at most grace, then cancel
	// them and wait for them to notice (every handler honours its ctx).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer.Reset(grace)
	select {
	case <-done:
	case <-timer.C:
		cancelReqs()
		<-done
	}
	return started, dropped
}
