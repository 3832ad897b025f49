package holdfast_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
	"github.com/holdfast-dev/holdfast/tier"
)

// Several Caches over one inmem tier stand for several processes over one
// Redis; the real-Redis versions of these tests are in package redis.

func TestLeasesCoalesceAcrossProcesses(t *testing.T) {
	shared := inmem.New(nil)
	var loads atomic.Int64
	load := func(ctx context.Context, key string) ([]byte, error) {
		loads.Add(1)
		time.Sleep(100 * time.Millisecond)
		return []byte("v"), nil
	}
	const processes, readers = 4, 50
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range processes {
		c := newCache(t, holdfast.Options{Shared: shared})
		ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if res, err := ns.Get(context.Background(), "cold", load); err != nil || string(res.Value) != "v" {
					bad.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d reads failed", bad.Load())
	}
	if got := loads.Load(); got != 1 {
		t.Fatalf("loader calls = %d across %d processes, want 1", got, processes)
	}
}

// A waiter that finds the key missing and then takes the lease, because its
// holder stored the value and released the lease in between, reads once
// more before loading: one load, not two.
func TestLeaseFreedBetweenAWaitersReadAndItsLease(t *testing.T) {
	shared := inmem.New(nil)
	released := make(chan struct{})
	waiting := make(chan struct{})
	holder := &leaseHooks{Tier: shared, afterRelease: func() { close(released) }}
	var waiterLeases atomic.Int64
	waiter := &leaseHooks{Tier: shared, beforeLease: func() {
		if waiterLeases.Add(1) == 2 { // the first try is refused; the second follows a poll's miss
			close(waiting)
			<-released
		}
	}}
	p := holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true, Poll: 5 * time.Millisecond}, Hot: holdfast.HotPolicy{MaxBytes: -1}}
	a := newNS(t, newCache(t, holdfast.Options{Shared: holder}), "product", p)
	b := newNS(t, newCache(t, holdfast.Options{Shared: waiter}), "product", p)
	load := &countingLoader{gate: make(chan struct{})}

	got := make(chan holdfast.Result, 2)
	go func() { res, _ := a.Get(context.Background(), "k", load.Load); got <- res }()
	eventually(t, "the holder's load to start", func() bool { return load.calls.Load() == 1 })
	go func() { res, _ := b.Get(context.Background(), "k", load.Load); got <- res }()
	<-waiting // the waiter read a miss and is about to send its second Lease
	close(load.gate)
	for range 2 {
		if res := <-got; string(res.Value) != "v1:k" {
			t.Fatalf("a reader got %q from %v, want the holder's v1:k", res.Value, res.Source)
		}
	}
	if n := load.calls.Load(); n != 1 {
		t.Fatalf("loader calls = %d, want 1", n)
	}
	if st := b.Stats(); st.Get("leases.taken") != 1 || st.Get("lease.waits") != 1 {
		t.Fatalf("waiter: leases taken %d, waits %d; want 1 and 1", st.Get("leases.taken"), st.Get("lease.waits"))
	}
	eventually(t, "the waiter's lease to be released", func() bool {
		ok, _ := shared.Lease(context.Background(), "product:k", "probe", time.Minute)
		return ok
	})
}

// leaseHooks is an inmem tier whose Lease and Release calls run hooks.
type leaseHooks struct {
	*inmem.Tier
	beforeLease  func()
	afterRelease func()
}

func (h *leaseHooks) Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if h.beforeLease != nil {
		h.beforeLease()
	}
	return h.Tier.Lease(ctx, key, token, ttl)
}

func (h *leaseHooks) Release(ctx context.Context, key, token string) error {
	err := h.Tier.Release(ctx, key, token)
	if h.afterRelease != nil {
		h.afterRelease()
	}
	return err
}

func TestLeaseOfADeadHolderExpires(t *testing.T) {
	shared := inmem.New(nil)
	// A process took the lease and died: nobody releases it.
	if ok, _ := shared.Lease(context.Background(), "product:k", "dead", 300*time.Millisecond); !ok {
		t.Fatal("test setup: could not take the lease")
	}
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true, TTL: 300 * time.Millisecond}})
	start := time.Now()
	res := mustGet(t, ns, "k", ((&countingLoader{}).Load))
	if waited := time.Since(start); waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("waited %v for a dead holder's 300 ms lease", waited)
	}
	if string(res.Value) != "v1:k" || ns.Stats().Get("leases.taken") != 1 {
		t.Fatalf("got %q, stats %+v: want this process to take the expired lease and load", res.Value, ns.Stats())
	}
}

func TestLeasesSkippedWhileTheTierFails(t *testing.T) {
	shared := inmem.New(nil)
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
	shared.Fail(inmem.ErrInjected)
	start := time.Now()
	mustGet(t, ns, "k", ((&countingLoader{}).Load))
	if time.Since(start) > time.Second || shared.Calls().Leases != 0 {
		t.Fatalf("a failing tier delayed the load or was asked for a lease (%d)", shared.Calls().Leases)
	}
}

// A load that read the database before another process's invalidation must
// not land in the shared tier after it.
func TestStaleSetGuardAcrossProcesses(t *testing.T) {
	shared := inmem.New(nil)
	a := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", holdfast.Policy{})
	b := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", holdfast.Policy{})
	slow := &countingLoader{gate: make(chan struct{})}
	got := make(chan holdfast.Result, 1)
	go func() { res, _ := a.Get(context.Background(), "p1", slow.Load); got <- res }()
	eventually(t, "A's load to start", func() bool { return slow.calls.Load() == 1 })
	if err := b.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	close(slow.gate)
	<-got
	// B's invalidation detached A's flight, so Loading says nothing about
	// it; the flight's end is its dropped set, counted after its readers
	// were answered when the shared tier refused the write.
	eventually(t, "A's stale set to be dropped", func() bool { return a.Stats().Get("dropped_stale_sets") == 1 })
	if raw, ok := shared.Raw("product:p1"); ok {
		e, _ := tier.DecodeEntry(raw)
		t.Fatalf("A's stale load %q was stored over B's invalidation", e.Value)
	}
	// A load that starts after the invalidation is stored.
	mustGet(t, b, "p1", ((&countingLoader{}).Load))
	settle(t, b, "p1")
	if _, ok := shared.Raw("product:p1"); !ok {
		t.Fatal("a load after the invalidation was not stored")
	}
}

func TestStaleFromTheSharedTierWhenTheLoaderFails(t *testing.T) {
	clk := newClock()
	shared := inmem.New(clk.Now)
	c := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
	// Another process wrote the value; this one never saw it, so only the
	// shared tier can serve it stale.
	writer := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute})
	mustGet(t, writer, "p1", ((&countingLoader{}).Load))
	settle(t, writer, "p1")
	ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute})
	clk.Advance(30 * time.Second)
	res, err := ns.Get(context.Background(), "p1", (&countingLoader{err: errors.New("db down")}).Load)
	if err != nil || !answered(res, holdfast.SourceShared, holdfast.ReasonSourceFailed, true) || string(res.Value) != "v1:p1" {
		t.Fatalf("DB down, Redis up: %q from %v, err %v; want v1:p1 stale-on-error", res.Value, res.Source, err)
	}
}

func newClock() *fakeclock.Clock { return fakeclock.New(t0) }
