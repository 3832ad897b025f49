package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
	"github.com/holdfast-dev/holdfast/tier"
)

// golang.org/x/sync/singleflight's TestGoexitDo case: a loader that ends its
// goroutine with runtime.Goexit (as t.FailNow does from a loader) must not
// leave its key stuck: its readers get an error at once and the next read
// loads.
func TestLoaderGoexitFreesTheKey(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	// The backoff is off: the next read shows the key free at once.
	ns := newNS(t, c, "product", holdfast.Policy{LoadTimeout: 10 * time.Second, LoadErrorBackoff: -1})
	exit := func(ctx context.Context, key string) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const readers = 8
	var wg sync.WaitGroup
	errs := make([]error, readers)
	start := time.Now()
	for i := range readers {
		wg.Go(func() { _, errs[i] = ns.Get(ctx, "k", exit) })
	}
	wg.Wait()
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("readers waited %v for a loader that called Goexit", waited)
	}
	for i, err := range errs {
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reader %d: err = %v, want the loader's exit as an error", i, err)
		}
	}
	res, err := ns.Get(ctx, "k", ((&countingLoader{}).Load))
	if err != nil || string(res.Value) != "v1:k" || res.Source != holdfast.SourceLoaded {
		t.Fatalf("next read: %q, %v, %v; want a fresh load", res.Value, res.Source, err)
	}
}

// A loader that ignores its context does not hold its readers past
// LoadTimeout: they are answered (an error naming the timeout, or a stale
// value) when it passes, and the late value is not stored.
func TestLoaderIgnoringItsContextAnsweredAtLoadTimeout(t *testing.T) {
	shared := inmem.New(nil)
	c := newCache(t, holdfast.Options{Shared: shared})
	const loadTimeout = 200 * time.Millisecond
	// The backoff is off: the next read shows the key free at once.
	ns := newNS(t, c, "product", holdfast.Policy{LoadTimeout: loadTimeout, LoadErrorBackoff: -1})
	release := make(chan struct{})
	var calls atomic.Int64
	stubborn := func(ctx context.Context, key string) ([]byte, error) {
		calls.Add(1)
		<-release // ignores ctx
		return []byte("late"), nil
	}
	const readers = 20
	var wg sync.WaitGroup
	waits := make([]time.Duration, readers)
	errs := make([]error, readers)
	for i := range readers {
		wg.Go(func() {
			start := time.Now()
			_, errs[i] = ns.Get(context.Background(), "k", stubborn)
			waits[i] = time.Since(start)
		})
	}
	wg.Wait()
	var worst time.Duration
	for i := range readers {
		if !errors.Is(errs[i], context.DeadlineExceeded) {
			t.Fatalf("reader %d: err = %v, want a load timeout", i, errs[i])
		}
		worst = max(worst, waits[i])
	}
	t.Logf("slowest of %d readers answered after %v (LoadTimeout %v)", readers, worst, loadTimeout)
	// The answer comes at LoadTimeout; the margin is for a busy machine.
	if worst > loadTimeout+150*time.Millisecond {
		t.Fatalf("a reader waited %v, LoadTimeout is %v", worst, loadTimeout)
	}
	if calls.Load() != 1 {
		t.Fatalf("loader calls = %d, want 1", calls.Load())
	}
	close(release)
	eventually(t, "the late loader to return", func() bool { return ns.Stats().Get("load.timeouts") == 1 })
	if _, ok := shared.Raw("product:k"); ok {
		t.Fatal("the late value was stored")
	}
	res, err := ns.Get(context.Background(), "k", ((&countingLoader{}).Load))
	if err != nil || string(res.Value) != "v1:k" {
		t.Fatalf("next read: %q, %v; want a fresh load", res.Value, err)
	}
}

// While a slow source holds load slots with background refreshes (their
// readers were served stale values), a reader with nothing to be served
// still gets a slot.
func TestRefreshesLeaveSlotsForReaders(t *testing.T) {
	clk := fakeclock.New(t0)
	c := newCache(t, holdfast.Options{MaxConcurrentLoads: 4, Clock: clk})
	ns := newNS(t, c, "stock", holdfast.Policy{SoftTTL: 50 * time.Millisecond, TTL: time.Hour})
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		mustGet(t, ns, k, ((&countingLoader{}).Load))
	}
	clk.Advance(60 * time.Millisecond) // past soft: the next reads refresh
	gate := make(chan struct{})
	defer close(gate)
	slow := &countingLoader{gate: gate}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		res, err := ns.Get(context.Background(), k, slow.Load)
		if err != nil || !answered(res, holdfast.SourceMemory, holdfast.ReasonRevalidating, true) {
			t.Fatalf("%s: %v, %v; want the stale value while it refreshes", k, res.Source, err)
		}
	}
	// Three refreshes hold three of the four slots; the other three found
	// only the reserved slot and were rejected (their readers keep the
	// stale value).
	eventually(t, "three refreshes to hold slots and three to be turned away", func() bool {
		return slow.calls.Load() == 3 && ns.Stats().Get("refresh.rejected") == 3
	})
	if st := ns.Stats(); st.Get("load.rejected") != 0 {
		t.Fatalf("%d reads rejected; only refreshes were", st.Get("load.rejected"))
	}
	res, err := ns.Get(context.Background(), "cold", ((&countingLoader{}).Load))
	if err != nil || res.Source != holdfast.SourceLoaded {
		t.Fatalf("cold read: %v, %v; want it loaded in the slot refreshes leave free", res.Source, err)
	}
}

// A lease whose holder never releases it (an orphan, here one with a TTL
// longer than any holder would set) stalls a waiter for Lease.TTL +
// LoadTimeout at most — the longest a holder can legitimately take — and
// the waiter's own load then gets a whole LoadTimeout, never a context the
// wait used up.
func TestLeaseWaitBoundedAndLoaderGetsItsOwnTimeout(t *testing.T) {
	shared := inmem.New(nil)
	if ok, _ := shared.Lease(context.Background(), "product:k", "orphan", time.Minute); !ok {
		t.Fatal("setup: lease")
	}
	c := newCache(t, holdfast.Options{Shared: shared})
	const leaseTTL, loadTimeout = 300 * time.Millisecond, time.Second
	ns := newNS(t, c, "product", holdfast.Policy{LoadTimeout: loadTimeout, Lease: holdfast.LeasePolicy{Enabled: true, TTL: leaseTTL}})
	var left time.Duration
	l := func(ctx context.Context, key string) ([]byte, error) {
		d, _ := ctx.Deadline()
		left = time.Until(d)
		return []byte("v"), nil
	}
	start := time.Now()
	res, err := ns.Get(context.Background(), "k", l)
	waited := time.Since(start)
	if err != nil || string(res.Value) != "v" {
		t.Fatalf("got %q, %v", res.Value, err)
	}
	if bound := leaseTTL + loadTimeout; waited < bound || waited > bound+time.Second {
		t.Fatalf("waited %v under a 1 min orphan; the bound is Lease.TTL + LoadTimeout = %v", waited, bound)
	}
	if left < loadTimeout-500*time.Millisecond {
		t.Fatalf("the loader had %v left of its %v LoadTimeout", left, loadTimeout)
	}
	if s := ns.Stats(); s.Get("lease.gave_up") != 1 {
		t.Fatalf("stats %+v: want one wait given up", s)
	}
}

// A waiter that holds the key's current value (loaded here, no
// invalidation since) serves it at once instead of waiting for another
// process's lease; one whose value was invalidated waits.
func TestLeaseWaiterServesHeldCurrentValue(t *testing.T) {
	shared := inmem.New(nil)
	// The eviction below would be written back from memory (refill.go):
	// without tier.Refiller the read waits on the lease.
	c := newCache(t, holdfast.Options{Shared: withoutRefill{shared}})
	// Only hot keys in the hot tier, so that the read goes to the shared
	// tier and meets the lease.
	p := holdfast.Policy{StaleIfError: time.Minute, Lease: holdfast.LeasePolicy{Enabled: true, TTL: 400 * time.Millisecond}, Hot: holdfast.HotPolicy{Threshold: 1000.0 / 60}}
	ns := newNS(t, c, "product", p)
	mustGet(t, ns, "k", ((&countingLoader{}).Load))
	// The shared copy is evicted (no invalidation) and another process
	// holds the lease.
	if err := shared.Delete(context.Background(), "product:k"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := shared.Lease(context.Background(), "product:k", "other", time.Second); !ok {
		t.Fatal("setup: lease")
	}
	start := time.Now()
	res, err := ns.Get(context.Background(), "k", ((&countingLoader{}).Load))
	if err != nil || string(res.Value) != "v1:k" || !answered(res, holdfast.SourceMemory, holdfast.ReasonPeerLoading, false) {
		t.Fatalf("got %q from %v, %v; want the held value v1:k, from memory", res.Value, res.Source, err)
	}
	if waited := time.Since(start); waited > 200*time.Millisecond {
		t.Fatalf("waited %v with the current value in hand", waited)
	}
	settle(t, ns, "k")

	// Invalidated by another process: the held value is no longer current.
	other := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", p)
	if err := other.Invalidate(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first lease to expire and a second to be taken", func() bool {
		ok, _ := shared.Lease(context.Background(), "product:k", "other2", 300*time.Millisecond)
		return ok
	})
	res, err = ns.Get(context.Background(), "k", ((&countingLoader{}).Load))
	if err != nil || res.Source != holdfast.SourceLoaded {
		t.Fatalf("after an invalidation: %q from %v, %v; want a load, not the held value", res.Value, res.Source, err)
	}
}

// leaseFaults wraps an inmem tier: Lease takes the lease and then reports
// an error (a reply lost after the SET ran), and Release fails its first
// failReleases calls.
type leaseFaults struct {
	*inmem.Tier
	loseLeaseReply bool
	failReleases   atomic.Int64
}

func (l *leaseFaults) Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	got, err := l.Tier.Lease(ctx, key, token, ttl)
	if l.loseLeaseReply && err == nil {
		return false, errors.New("connection reset after the command was sent")
	}
	return got, err
}

func (l *leaseFaults) Release(ctx context.Context, key, token string) error {
	if l.failReleases.Add(-1) >= 0 {
		return errors.New("injected release failure")
	}
	return l.Tier.Release(ctx, key, token)
}

func TestLeaseWithALostReplyIsReleased(t *testing.T) {
	shared := &leaseFaults{Tier: inmem.New(nil), loseLeaseReply: true}
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true, TTL: time.Minute}})
	mustGet(t, ns, "k", ((&countingLoader{}).Load))
	if ok, err := shared.Tier.Lease(context.Background(), "product:k", "next", time.Second); !ok || err != nil {
		t.Fatalf("the lease set by a call whose reply was lost is still held (%v, %v)", ok, err)
	}
}

func TestFailedReleaseIsRetried(t *testing.T) {
	shared := &leaseFaults{Tier: inmem.New(nil)}
	shared.failReleases.Store(3)
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true, TTL: time.Minute}})
	mustGet(t, ns, "k", ((&countingLoader{}).Load))
	eventually(t, "the release to land", func() bool {
		ok, _ := shared.Tier.Lease(context.Background(), "product:k", "next", time.Second)
		return ok
	})
	if got := shared.Calls().Releases; got != 1 {
		t.Fatalf("releases that reached the tier = %d, want 1 after 3 failures", got)
	}
}

// Read-your-invalidations: after this process invalidated a key, a shared
// value loaded before that (a node that never saw the invalidation answers
// with it, as a demoted primary does after a failover) reads as a miss here.
func TestOwnInvalidationSupersedesAnOlderSharedValue(t *testing.T) {
	shared := inmem.New(nil)
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{})
	mustGet(t, ns, "k", ((&countingLoader{}).Load))
	old, ok := shared.Raw("product:k")
	if !ok {
		t.Fatal("setup: nothing stored")
	}
	if err := ns.Invalidate(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	shared.Put("product:k", old, time.Minute) // the old value comes back
	l := &countingLoader{}
	l.calls.Store(1)
	res := mustGet(t, ns, "k", l.Load)
	if string(res.Value) != "v2:k" || res.Source != holdfast.SourceLoaded {
		t.Fatalf("got %q from %v; want v2:k loaded, never the value from before the invalidation", res.Value, res.Source)
	}
	if s := ns.Stats(); s.Get("superseded_reads") != 1 {
		t.Fatalf("superseded = %d, want 1", s.Get("superseded_reads"))
	}
	// Another process, which did not invalidate, cannot tell: it serves
	// what the tier holds (bounded by the value's own times).
	shared.Put("product:k", old, time.Minute)
	other := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", holdfast.Policy{})
	if res := mustGet(t, other, "k", ((&countingLoader{}).Load)); string(res.Value) != "v1:k" {
		t.Fatalf("other process: %q", res.Value)
	}
}

// A decision, tested: stale-if-error serves the last value this process
// knew even if another process invalidated it meanwhile, when fresh data
// cannot be had — the load failed, or the limiter refused it to protect the
// source. The window is the namespace's own statement of what it tolerates;
// this process cannot tell "changed" from "evicted" without the source.
func TestStaleIfErrorMayServeAValueInvalidatedElsewhere(t *testing.T) {
	shared := inmem.New(nil)
	p := holdfast.Policy{StaleIfError: time.Minute}
	a := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", p)
	b := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", p)
	mustGet(t, b, "k", ((&countingLoader{}).Load))
	if err := a.Invalidate(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// b's hot copy answers until b hears the announcement (or, had it
	// not heard the stream yet, checks its copies once it does).
	eventually(t, "b to drop its hot copy", func() bool { return b.Stats().Get("hot.entries") == 0 })
	res, err := b.Get(context.Background(), "k", (&countingLoader{err: errors.New("db down")}).Load)
	if err != nil || string(res.Value) != "v1:k" || !res.Stale() {
		t.Fatalf("load failed: %q from %v, %v; want the last value, stale", res.Value, res.Source, err)
	}
}

// With every default, a burst of a few dozen reads of distinct cold keys (a
// deploy, a mass invalidation) is loaded, not rejected: loads past the
// default limit wait their turn (LoadWait) instead of failing at once.
func TestColdBurstWithDefaultsIsNotRejected(t *testing.T) {
	c := newCache(t, holdfast.Options{Shared: inmem.New(nil)})
	ns := newNS(t, c, "product", holdfast.Policy{})
	l := func(ctx context.Context, key string) ([]byte, error) {
		time.Sleep(5 * time.Millisecond) // a quick database query
		return []byte(key), nil
	}
	const keys = 40
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range keys {
		wg.Go(func() {
			if _, err := ns.Get(context.Background(), fmt.Sprint("cold-", i), l); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || ns.Stats().Get("load.rejected") != 0 {
		t.Fatalf("%d of %d cold reads failed (%d rejected) with the default limit", failed.Load(), keys, ns.Stats().Get("load.rejected"))
	}
}

func TestNoLoadLimit(t *testing.T) {
	c := newCache(t, holdfast.Options{MaxConcurrentLoads: -1})
	ns := newNS(t, c, "product", holdfast.Policy{})
	gate := make(chan struct{})
	l := &countingLoader{gate: gate}
	const keys = 200
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { ns.Get(context.Background(), fmt.Sprint("k", i), l.Load) })
	}
	eventually(t, "every load to run at once", func() bool { return l.calls.Load() == keys })
	close(gate)
	wg.Wait()
	if ns.Stats().Get("load.rejected") != 0 {
		t.Fatal("a load was rejected with no limit")
	}
}

// A value past its soft time that turns up while a flight waits for another
// process's lease (the holder's write has not landed; a replica is behind)
// is served as stale, never as a fresh shared value.
func TestLeaseWaiterLabelsAnOldValueStale(t *testing.T) {
	shared := inmem.New(nil)
	if ok, _ := shared.Lease(context.Background(), "product:k", "other", time.Minute); !ok {
		t.Fatal("setup: lease")
	}
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
	type answer struct {
		res holdfast.Result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := ns.Get(context.Background(), "k", ((&countingLoader{}).Load))
		got <- answer{res, err}
	}()
	eventually(t, "the read to wait on the lease", func() bool { return ns.Stats().Get("lease.waits") == 1 })
	origin := time.Now().Add(-2 * time.Second)
	shared.Put("product:k", tier.AppendEntry(nil, tier.Entry{
		Value: []byte("old"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(time.Minute),
	}), time.Minute)
	a := <-got
	if a.err != nil || string(a.res.Value) != "old" || !answered(a.res, holdfast.SourceShared, holdfast.ReasonRevalidating, true) {
		t.Fatalf("got %q from %v, %v; want the old value labelled stale", a.res.Value, a.res.Source, a.err)
	}
}

// A shared-tier value already past its hard time is the last value this
// process knows: stale-if-error serves it again after the tier lost it.
func TestPastHardSharedValueKeptForStaleIfError(t *testing.T) {
	shared := inmem.New(nil)
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute, LoadErrorBackoff: -1})
	origin := time.Now().Add(-2 * time.Second)
	shared.Put("product:k", tier.AppendEntry(nil, tier.Entry{
		Value: []byte("last"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(time.Second),
	}), time.Minute)
	down := &countingLoader{err: errors.New("db down")}
	for i, drop := range []bool{false, true} {
		from := holdfast.SourceShared
		if drop { // another process invalidated it, or Redis evicted it
			from = holdfast.SourceMemory
			if err := shared.Delete(context.Background(), "product:k"); err != nil {
				t.Fatal(err)
			}
		}
		res, err := ns.Get(context.Background(), "k", down.Load)
		if err != nil || string(res.Value) != "last" || !answered(res, from, holdfast.ReasonSourceFailed, true) {
			t.Fatalf("read %d: %q from %v for %v, %v; want the last value from %v, stale-on-error", i, res.Value, res.Source, res.Reason, err, from)
		}
	}
}

// A load whose readers can be served a stale value never waits for a slot:
// with the source busy it is refused at once and the stale value is served,
// while a cold key (nothing to serve) waits its LoadWait turn.
func TestStaleReadersDoNotWaitForASlot(t *testing.T) {
	clk := fakeclock.New(t0)
	c := newCache(t, holdfast.Options{MaxConcurrentLoads: 1, LoadWait: 10 * time.Second, Clock: clk})
	ns := newNS(t, c, "stock", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute, LoadErrorBackoff: -1})
	mustGet(t, ns, "warm", ((&countingLoader{}).Load))
	clk.Advance(2 * time.Second) // past hard, within stale-if-error
	gate := make(chan struct{})
	defer close(gate)
	go ns.Get(context.Background(), "busy", (&countingLoader{gate: gate}).Load)
	eventually(t, "the only slot to be taken", func() bool { return c.LoadsInFlight() == 1 })
	start := time.Now()
	res, err := ns.Get(context.Background(), "warm", ((&countingLoader{}).Load))
	if err != nil || !answered(res, holdfast.SourceMemory, holdfast.ReasonOverloaded, true) {
		t.Fatalf("got %v, %v; want the stale value", res.Source, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("a read with a stale value waited %v for a slot", waited)
	}
}
