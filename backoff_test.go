package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

var errSourceDown = errors.New("source down")

// flakySource fails while down is set, and notes when it was called.
type flakySource struct {
	clk   *fakeclock.Clock
	down  atomic.Bool
	mu    sync.Mutex
	calls []time.Time
}

func (s *flakySource) Load(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	s.calls = append(s.calls, s.clk.Now())
	n := len(s.calls)
	s.mu.Unlock()
	if s.down.Load() {
		return nil, errSourceDown
	}
	return fmt.Appendf(nil, "v%d:%s", n, key), nil
}

// since returns the times of the calls made at or after t.
func (s *flakySource) since(t time.Time) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.calls, func(c time.Time) bool { return !c.Before(t) })
	if i < 0 {
		return nil
	}
	return slices.Clone(s.calls[i:])
}

// readsPerSecond is how hard the backoff tests' readers hammer one key, in
// simulated time: one read a millisecond.
const readsPerSecond = 1000

// backoffStep is the wait after the k-th failure in a row (k from 0) with
// the default LoadErrorBackoff and TTL, before jitter.
func backoffStep(k int) time.Duration {
	return min(holdfast.DefaultLoadErrorBackoff<<k, 30*time.Second)
}

// A source down for 100 s costs a key a handful of loader calls however
// hard it is read: the retries come further and further apart, up to 30 s,
// each shortened by at most a quarter. Meanwhile reads get the stale value
// while stale-if-error allows it and the load's error after, without a
// call. Once the source is back, the key is loaded at its next retry, and
// a later failure waits the first step again.
func TestLoadErrorBackoffGrowsDuringAnOutage(t *testing.T) {
	clk := fakeclock.New(t0)
	c := newCache(t, holdfast.Options{Clock: clk})
	// SlowLoadGrace runs on real time: on a busy machine it could answer
	// a read before the backoff does, with the same value.
	ns := newNS(t, c, "product", holdfast.Policy{StaleIfError: 40 * time.Second, SlowLoadGrace: -1})
	src := &flakySource{clk: clk}
	ctx := context.Background()
	mustGet(t, ns, "p1", src.Load)
	clk.Advance(61 * time.Second) // past hard (the default TTL, 1 min)
	staleUntil := t0.Add(100 * time.Second)

	src.down.Store(true)
	outage := clk.Now()
	var stale, failed int
	for clk.Now().Before(outage.Add(100 * time.Second)) {
		res, err := ns.Get(ctx, "p1", src.Load)
		if clk.Now().Before(staleUntil) {
			if err != nil || !answered(res, holdfast.SourceMemory, holdfast.ReasonSourceFailed, true) || string(res.Value) != "v1:p1" {
				t.Fatalf("at %v, within stale-if-error: %q from %v, %v", clk.Now().Sub(outage), res.Value, res.Source, err)
			}
			stale++
		} else {
			if !errors.Is(err, errSourceDown) {
				t.Fatalf("at %v, past stale-if-error: err %v, want the load's", clk.Now().Sub(outage), err)
			}
			failed++
		}
		clk.Advance(time.Second / readsPerSecond)
	}
	calls := src.since(outage)
	t.Logf("%d reads stale, %d failed, %d loader calls at %v", stale, failed, len(calls), offsets(calls, outage))
	if len(calls) < 5 || len(calls) > 10 {
		t.Fatalf("%d loader calls in a 100 s outage at %d reads a second; want 5 to 10", len(calls), readsPerSecond)
	}
	for k := 1; k < len(calls); k++ {
		gap, step := calls[k].Sub(calls[k-1]), backoffStep(k-1)
		if gap < step*3/4 || gap > step+time.Millisecond {
			t.Fatalf("retry %d came %v after the one before; want within [%v, %v]", k, gap, step*3/4, step)
		}
	}
	if st := ns.Stats(); st.Get("error_backoffs") != uint64(stale+failed-len(calls)) {
		t.Fatalf("error backoffs %d, want %d (reads less loader calls)", st.Get("error_backoffs"), stale+failed-len(calls))
	}

	// The source recovers: the read at the retry due loads the key.
	src.down.Store(false)
	due := calls[len(calls)-1].Add(backoffStep(len(calls) - 1))
	for {
		res, err := ns.Get(ctx, "p1", src.Load)
		if err == nil && res.Source == holdfast.SourceLoaded {
			settle(t, ns, "p1")
			break
		}
		if !errors.Is(err, errSourceDown) {
			t.Fatalf("at %v, waiting for the retry: %q from %v, %v", clk.Now().Sub(outage), res.Value, res.Source, err)
		}
		if clk.Now().After(due) {
			t.Fatalf("no load by %v, when the retry was due", clk.Now().Sub(outage))
		}
		clk.Advance(time.Second / readsPerSecond)
	}
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("after the recovery: served from %v, want the hot tier", res.Source)
	}

	// The next failure waits the first step, not the last.
	clk.Advance(time.Second / readsPerSecond)
	src.down.Store(true)
	if err := ns.Invalidate(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	again := clk.Now()
	for clk.Now().Before(again.Add(2 * time.Second)) {
		if _, err := ns.Get(ctx, "p1", src.Load); !errors.Is(err, errSourceDown) {
			t.Fatalf("with the source down again: err %v, want the load's", err)
		}
		clk.Advance(time.Second / readsPerSecond)
	}
	calls = src.since(again)
	if len(calls) < 2 || len(calls) > 3 {
		t.Fatalf("%d loader calls in the 2 s after a new failure, want 2 or 3 (the first step is 1 s)", len(calls))
	}
	if gap := calls[1].Sub(calls[0]); gap < backoffStep(0)*3/4 || gap > backoffStep(0)+time.Millisecond {
		t.Fatalf("first retry after a new failure came %v later; want the first step, [750ms, 1s]", gap)
	}
}

// Processes (and keys) whose loads failed at the same instant retry at
// different times: each wait is jittered.
func TestLoadErrorBackoffJittered(t *testing.T) {
	clk := fakeclock.New(t0)
	ctx := context.Background()
	var srcs [2]*flakySource
	var nss [2]*holdfast.Namespace
	for i := range nss {
		c := newCache(t, holdfast.Options{Clock: clk})
		nss[i] = newNS(t, c, "product", holdfast.Policy{})
		srcs[i] = &flakySource{clk: clk}
		srcs[i].down.Store(true)
	}
	start := clk.Now()
	for clk.Now().Before(start.Add(30 * time.Second)) {
		for i, ns := range nss {
			if _, err := ns.Get(ctx, "p1", srcs[i].Load); !errors.Is(err, errSourceDown) {
				t.Fatalf("err %v, want the load's", err)
			}
		}
		clk.Advance(time.Second / readsPerSecond)
	}
	a, b := offsets(srcs[0].since(start), start), offsets(srcs[1].since(start), start)
	t.Logf("calls of one process at %v, of the other at %v", a, b)
	if len(a) < 4 || len(b) < 4 {
		t.Fatalf("%d and %d loader calls in 30 s; want at least 4 each (1, 2, 4, 8 s apart)", len(a), len(b))
	}
	if slices.Equal(a, b) {
		t.Fatalf("both processes retried at the same instants: %v", a)
	}
}

// A namespace whose TTL is shorter than 30 s waits no longer than its TTL
// between failed loads: a key is back within one TTL of its source's
// recovery.
func TestLoadErrorBackoffCappedByTTL(t *testing.T) {
	clk := fakeclock.New(t0)
	c := newCache(t, holdfast.Options{Clock: clk})
	const ttl = 4 * time.Second
	ns := newNS(t, c, "stock", holdfast.Policy{TTL: ttl})
	src := &flakySource{clk: clk}
	src.down.Store(true)
	start := clk.Now()
	for clk.Now().Before(start.Add(30 * time.Second)) {
		if _, err := ns.Get(context.Background(), "s1", src.Load); !errors.Is(err, errSourceDown) {
			t.Fatalf("err %v, want the load's", err)
		}
		clk.Advance(time.Second / readsPerSecond)
	}
	calls := src.since(start)
	t.Logf("loader calls at %v", offsets(calls, start))
	if len(calls) < 8 {
		t.Fatalf("%d loader calls in 30 s; want at least 8 (1, 2, then 4 s apart at most)", len(calls))
	}
	for k := 1; k < len(calls); k++ {
		gap, step := calls[k].Sub(calls[k-1]), min(backoffStep(k-1), ttl)
		if gap < step*3/4 || gap > step+time.Millisecond {
			t.Fatalf("retry %d came %v after the one before; want within [%v, %v]", k, gap, step*3/4, step)
		}
	}
}

// offsets are times as durations since start, for messages and comparison.
func offsets(ts []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}

// An invalidation ends the key's load-error backoff, in the process that
// made it and in every process that hears it: the source holds a new value,
// so a failure to load the old one says nothing about it. Without this, a
// process whose loads failed during a database outage answered an update
// made just after the database's return with the old value and the
// outage's error until its retry was due.
func TestInvalidationEndsTheLoadErrorBackoff(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	p := hotEverywhere
	p.LoadErrorBackoff = time.Hour // no retry falls due during the test
	a := newListeningNS(t, holdfast.Options{Shared: shared}, p)
	b := newListeningNS(t, holdfast.Options{Shared: shared}, p)
	ctx := context.Background()
	for _, ns := range []*holdfast.Namespace{a, b} {
		mustGet(t, ns, "p1", src.Load)
		settle(t, ns, "p1")
	}

	// The database goes down and p1 is invalidated: both processes' loads
	// of it fail. The one that invalidated has dropped its copies and
	// answers the load's error; the other answers its old copy, stale.
	down := errors.New("db down")
	src.fail(down)
	if err := a.Invalidate(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to hear the invalidation", func() bool { return b.Stats().Get("invalidations.heard") == 1 })
	for range 3 {
		if res, err := a.Get(ctx, "p1", src.Load); !errors.Is(err, down) {
			t.Fatalf("the invalidating process, database down: %q from %v, %v; want the load's error", res.Value, res.Source, err)
		}
		res, err := b.Get(ctx, "p1", src.Load)
		if err != nil || !errors.Is(res.LoadErr, down) || string(res.Value) != "p1@0" {
			t.Fatalf("the other process, database down: %q from %v (load error %v), %v; want the old p1@0 with the load's error", res.Value, res.Source, res.LoadErr, err)
		}
	}
	for i, ns := range []*holdfast.Namespace{a, b} {
		if n := ns.Stats().Get("error_backoffs"); n < 2 {
			t.Fatalf("process %d: %d reads answered by the backoff, want 2", i, n)
		}
	}

	// The database returns and p1 is updated and invalidated: each
	// process's next read loads the update.
	src.fail(nil)
	want := src.update("p1")
	if err := a.Invalidate(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to hear the second invalidation", func() bool { return b.Stats().Get("invalidations.heard") == 2 })
	for i, ns := range []*holdfast.Namespace{a, b} {
		res, err := ns.Get(ctx, "p1", src.Load)
		if err != nil || res.LoadErr != nil || string(res.Value) != want {
			t.Fatalf("process %d after the update: %q from %v/%v (load error %v), %v; want %s", i, res.Value, res.Source, res.Reason, res.LoadErr, err, want)
		}
	}
}
