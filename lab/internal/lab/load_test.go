package lab

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sleepy is a fake handler that takes d (or until its ctx ends), standing
// for a system under test that has become slow.
func sleepy(d time.Duration, started *atomic.Int64, startedAt *sync.Map) Handle {
	return func(ctx context.Context, i int, late time.Duration, dropped bool) {
		if dropped {
			return
		}
		started.Add(1)
		startedAt.Store(i, time.Now())
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// A slow handler must not reduce the number of requests started, nor delay
// them: the sender keeps to its schedule (open model).
func TestDriverOpenModel(t *testing.T) {
	sched := ConstantRate(100, 500*time.Millisecond, func(int) string { return "k" })
	if len(sched) != 50 {
		t.Fatalf("schedule has %d requests, want 50", len(sched))
	}
	var started atomic.Int64
	var at sync.Map
	begin := time.Now()
	n, dropped := Driver{}.Run(context.Background(), begin, sched, sleepy(300*time.Millisecond, &started, &at))
	if n != 50 || dropped != 0 || started.Load() != 50 {
		t.Fatalf("started %d (handler saw %d), dropped %d; want 50, 0", n, started.Load(), dropped)
	}
	// With a closed model of one worker the last would start after 49 ×
	// 300 ms; open, it starts on time at 490 ms.
	last, _ := at.Load(49)
	if lag := last.(time.Time).Sub(begin.Add(sched[49].At)); lag > 150*time.Millisecond {
		t.Errorf("last request started %v late; the sender waited for slow requests", lag)
	}
	if took := time.Since(begin); took > 1500*time.Millisecond {
		t.Errorf("run took %v; want about 0.8 s (schedule + one slow request)", took)
	}
}

// Past MaxInFlight, due requests are dropped and reported, not queued.
func TestDriverDropsOverCapacity(t *testing.T) {
	sched := ConstantRate(200, 100*time.Millisecond, func(int) string { return "k" })
	var started atomic.Int64
	var at sync.Map
	var reportedDrops atomic.Int64
	slow := sleepy(time.Second, &started, &at)
	h := func(ctx context.Context, i int, late time.Duration, dropped bool) {
		if dropped {
			reportedDrops.Add(1)
		}
		slow(ctx, i, late, dropped)
	}
	n, dropped := Driver{MaxInFlight: 5, Grace: 50 * time.Millisecond}.Run(context.Background(), time.Now(), sched, h)
	if n != 5 || dropped != 15 || reportedDrops.Load() != 15 {
		t.Fatalf("started %d, dropped %d (reported %d); want 5, 15, 15", n, dropped, reportedDrops.Load())
	}
}

// The drain grace cancels requests still running, so a run is bounded in
// time even when the system under test never answers.
func TestDriverGraceBoundsRun(t *testing.T) {
	sched := ConstantRate(100, 50*time.Millisecond, func(int) string { return "k" })
	begin := time.Now()
	Driver{Grace: 100 * time.Millisecond}.Run(context.Background(), begin, sched,
		func(ctx context.Context, i int, late time.Duration, dropped bool) { <-ctx.Done() })
	if took := time.Since(begin); took > time.Second {
		t.Fatalf("run took %v with a 100 ms grace", took)
	}
}

// Cancelling ctx stops the sender.
func TestDriverStopsOnCancel(t *testing.T) {
	sched := ConstantRate(100, 10*time.Second, func(int) string { return "k" })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	n, _ := Driver{}.Run(ctx, time.Now(), sched, func(context.Context, int, time.Duration, bool) {})
	if n < 10 || n > 30 {
		t.Fatalf("started %d requests in 200 ms at 100/s; want about 20", n)
	}
}
