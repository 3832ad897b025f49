package holdfast_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// Get's behaviour table, run for Get and for GetMany: both must keep every
// guarantee because they walk the same stages, not copies of them.

// reader reads one key the way Get or GetMany does.
type reader struct {
	name string
	read func(ctx context.Context, ns *holdfast.Namespace, key string, l holdfast.Loader) (holdfast.Result, error)
}

// companion is read beside the key under test by GetMany, so that its
// lookup and load take the multi-key paths (one GetMany to the shared
// tier, versions and leases per key, one batched loader call).
const companion = "companion"

var readers = []reader{
	{"Get", func(ctx context.Context, ns *holdfast.Namespace, key string, l holdfast.Loader) (holdfast.Result, error) {
		return ns.Get(ctx, key, l)
	}},
	{"GetMany", func(ctx context.Context, ns *holdfast.Namespace, key string, l holdfast.Loader) (holdfast.Result, error) {
		batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
			out := make(map[string][]byte, len(keys))
			for _, k := range keys {
				if k == companion {
					out[k] = []byte("c")
					continue
				}
				v, err := l(ctx, k)
				if errors.Is(err, holdfast.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, err
				}
				out[k] = v
			}
			return out, nil
		}
		rs, errs := ns.GetMany(ctx, []string{key, companion}, batch)
		if errs != nil {
			return rs[0], errs[0]
		}
		return rs[0], nil
	}},
}

func forEachReader(t *testing.T, test func(t *testing.T, r reader)) {
	for _, r := range readers {
		t.Run(r.name, func(t *testing.T) { test(t, r) })
	}
}

func mustRead(t *testing.T, r reader, ns *holdfast.Namespace, key string, l holdfast.Loader) holdfast.Result {
	t.Helper()
	res, err := r.read(context.Background(), ns, key, l)
	if err != nil {
		t.Fatalf("%s(%q): %v", r.name, key, err)
	}
	settle(t, ns, key)
	settle(t, ns, companion)
	return res
}

func TestReadPathCoalesces(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		c := newCache(t, holdfast.Options{Shared: inmem.New(nil)})
		ns := newNS(t, c, "product", holdfast.Policy{})
		l := &countingLoader{gate: make(chan struct{})}
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range 50 {
			wg.Go(func() {
				if res, err := r.read(context.Background(), ns, "k", l.Load); err != nil || string(res.Value) != "v1:k" {
					bad.Add(1)
				}
			})
		}
		eventually(t, "the load to start", func() bool { return l.calls.Load() == 1 })
		time.Sleep(10 * time.Millisecond) // let the other readers join
		close(l.gate)
		wg.Wait()
		if bad.Load() != 0 || l.calls.Load() != 1 {
			t.Fatalf("%d bad reads, %d loads; want 0 and 1", bad.Load(), l.calls.Load())
		}
	})
}

func TestReadPathLeasesAcrossProcesses(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		shared := inmem.New(nil)
		var loads atomic.Int64
		l := func(ctx context.Context, key string) ([]byte, error) {
			loads.Add(1)
			time.Sleep(100 * time.Millisecond)
			return []byte("v"), nil
		}
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range 3 {
			ns := newNS(t, newCache(t, holdfast.Options{Shared: shared}), "product", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
			for range 10 {
				wg.Go(func() {
					if res, err := r.read(context.Background(), ns, "cold", l); err != nil || string(res.Value) != "v" {
						bad.Add(1)
					}
				})
			}
		}
		wg.Wait()
		if bad.Load() != 0 || loads.Load() != 1 {
			t.Fatalf("%d bad reads, %d loads across 3 processes; want 0 and 1", bad.Load(), loads.Load())
		}
	})
}

func TestReadPathLoadErrorBackoff(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		clk := fakeclock.New(t0)
		c := newCache(t, holdfast.Options{Clock: clk})
		ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}})
		mustRead(t, r, ns, "p1", (&countingLoader{}).Load)
		clk.Advance(2 * time.Second) // past hard
		down := &countingLoader{err: errors.New("db down")}
		for i := range 20 {
			res, err := r.read(context.Background(), ns, "p1", down.Load)
			if err != nil || !answered(res, holdfast.SourceMemory, holdfast.ReasonSourceFailed, true) || string(res.Value) != "v1:p1" {
				t.Fatalf("read %d with the source down: %q %v %v", i, res.Value, res.Source, err)
			}
		}
		if down.calls.Load() != 1 {
			t.Fatalf("loader calls = %d within the backoff, want 1", down.calls.Load())
		}
	})
}

func TestReadPathSmearsHotKeys(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		clk := fakeclock.New(t0)
		shared := inmem.New(clk.Now).Smearing(3)
		c := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
		ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Hour, Hot: holdfast.HotPolicy{MaxBytes: -1, Threshold: 50, HalfLife: time.Second}})
		l := &countingLoader{}
		for range 400 {
			clk.Advance(2500 * time.Microsecond)
			mustRead(t, r, ns, "viral", l.Load)
		}
		if st := ns.Stats(); st.Get("smeared.reads") == 0 || shared.Calls().SmearedGets == 0 {
			t.Fatalf("no smeared read of the hot key: %+v", st)
		}
		if err := ns.Invalidate(context.Background(), "viral"); err != nil {
			t.Fatal(err)
		}
		mustRead(t, r, ns, "viral", l.Load)
		if st := ns.Stats(); st.Get("smeared.writes") != 1 {
			t.Fatalf("smeared writes %d after a reload of the hot key, want 1", st.Get("smeared.writes"))
		}
	})
}

func TestReadPathStaleIfError(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		clk := fakeclock.New(t0)
		shared := inmem.New(clk.Now)
		c := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
		ns := newNS(t, c, "stock", holdfast.Policy{TTL: time.Second, StaleIfError: 5 * time.Second, LoadErrorBackoff: -1, Hot: holdfast.HotPolicy{MaxBytes: -1}})
		mustRead(t, r, ns, "s1", (&countingLoader{}).Load)
		down := &countingLoader{err: errors.New("db down")}
		clk.Advance(3 * time.Second)
		res, err := r.read(context.Background(), ns, "s1", down.Load)
		if err != nil || !answered(res, holdfast.SourceShared, holdfast.ReasonSourceFailed, true) || string(res.Value) != "v1:s1" {
			t.Fatalf("inside the window: %q from %v, %v", res.Value, res.Source, err)
		}
		clk.Advance(4 * time.Second) // past hard + StaleIfError
		if _, err := r.read(context.Background(), ns, "s1", down.Load); !errors.Is(err, down.err) {
			t.Fatalf("past the window: err = %v, want the loader's", err)
		}
	})
}

func TestReadPathInvalidationDuringALoad(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		shared := inmem.New(nil)
		c := newCache(t, holdfast.Options{Shared: shared})
		ns := newNS(t, c, "product", holdfast.Policy{StaleIfError: time.Minute})
		l := &countingLoader{gate: make(chan struct{})}
		done := make(chan struct{})
		go func() { r.read(context.Background(), ns, "p1", l.Load); close(done) }()
		eventually(t, "the load to start", func() bool { return l.calls.Load() == 1 })
		if err := ns.Invalidate(context.Background(), "p1"); err != nil {
			t.Fatal(err)
		}
		close(l.gate)
		<-done
		settle(t, ns, "p1")
		if _, ok := shared.Raw("product:p1"); ok {
			t.Fatal("a load that began before the invalidation was stored")
		}
		l.gate = nil
		if res := mustRead(t, r, ns, "p1", l.Load); string(res.Value) != "v2:p1" {
			t.Fatalf("after the invalidation: %q, want a new load", res.Value)
		}
	})
}

func TestReadPathLoadTimeoutWhateverTheLoader(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		c := newCache(t, holdfast.Options{})
		const loadTimeout = 100 * time.Millisecond
		ns := newNS(t, c, "product", holdfast.Policy{LoadTimeout: loadTimeout})
		release := make(chan struct{})
		defer close(release)
		stubborn := func(context.Context, string) ([]byte, error) {
			<-release
			return []byte("late"), nil
		}
		start := time.Now()
		_, err := r.read(context.Background(), ns, "k", stubborn)
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > loadTimeout+150*time.Millisecond {
			t.Fatalf("answered after %v with %v; want a load timeout at %v", took, err, loadTimeout)
		}
	})
}

func TestReadPathLoaderGoexit(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		c := newCache(t, holdfast.Options{})
		// The backoff is off: the next read shows the key free at once.
		ns := newNS(t, c, "product", holdfast.Policy{LoadErrorBackoff: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		exit := func(context.Context, string) ([]byte, error) {
			runtime.Goexit()
			return nil, nil
		}
		if _, err := r.read(ctx, ns, "k", exit); err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the loader's exit", err)
		}
		if res := mustRead(t, r, ns, "k", (&countingLoader{}).Load); string(res.Value) != "v1:k" {
			t.Fatalf("next read %q, want a load", res.Value)
		}
	})
}

type tenantKey struct{}

func TestReadPathLoaderSeesTheReadersValuesNotItsCancellation(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		c := newCache(t, holdfast.Options{})
		ns := newNS(t, c, "product", holdfast.Policy{})
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), tenantKey{}, "acme"))
		var tenant atomic.Value
		var cancelled atomic.Bool
		started := make(chan struct{})
		l := func(lctx context.Context, key string) ([]byte, error) {
			tenant.Store(lctx.Value(tenantKey{}))
			close(started)
			time.Sleep(50 * time.Millisecond)
			cancelled.Store(lctx.Err() != nil)
			return []byte("v"), nil
		}
		go func() { <-started; cancel() }()
		r.read(ctx, ns, "k", l)
		settle(t, ns, "k")
		if tenant.Load() != "acme" {
			t.Fatalf("the loader saw tenant %v, want the reader's", tenant.Load())
		}
		if cancelled.Load() {
			t.Fatal("the reader's cancellation reached the shared load")
		}
	})
}

func TestReadPathStaleWhileRevalidate(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		clk := fakeclock.New(t0)
		c := newCache(t, holdfast.Options{Shared: inmem.New(clk.Now), Clock: clk})
		ns := newNS(t, c, "stock", holdfast.Policy{SoftTTL: time.Second, TTL: 5 * time.Second})
		l := &countingLoader{}
		mustRead(t, r, ns, "s1", l.Load)
		clk.Advance(2 * time.Second)
		res, err := r.read(context.Background(), ns, "s1", l.Load)
		if err != nil || !answered(res, holdfast.SourceShared, holdfast.ReasonRevalidating, true) || string(res.Value) != "v1:s1" {
			t.Fatalf("past soft: %q from %v, %v; want the stale value", res.Value, res.Source, err)
		}
		settle(t, ns, "s1")
		if l.calls.Load() != 2 {
			t.Fatalf("loads = %d, want one refresh", l.calls.Load())
		}
	})
}

// With NegativeTTL negative, a not-found answer is returned and not
// remembered: each read asks the loader, nothing is written to the shared
// tier, and this process's copy of an earlier value goes, so that
// stale-if-error cannot bring it back.
func TestReadPathNegativeCachingOff(t *testing.T) {
	forEachReader(t, func(t *testing.T, r reader) {
		clk := fakeclock.New(t0)
		shared := inmem.New(clk.Now)
		c := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
		ns := newNS(t, c, "product", holdfast.Policy{NegativeTTL: -1})
		var calls atomic.Int64
		missing := func(ctx context.Context, key string) ([]byte, error) {
			calls.Add(1)
			return nil, holdfast.ErrNotFound
		}
		for i := range 3 {
			res, err := r.read(context.Background(), ns, "nope", missing)
			if !errors.Is(err, holdfast.ErrNotFound) || !res.NotFound {
				t.Fatalf("read %d: err %v, not found %v; want ErrNotFound", i, err, res.NotFound)
			}
			settle(t, ns, "nope")
		}
		if calls.Load() != 3 {
			t.Fatalf("loader calls = %d for 3 reads, want 3: nothing remembered", calls.Load())
		}
		if _, ok := shared.Raw("product:nope"); ok {
			t.Fatal("a not-found answer was written to the shared tier")
		}
		if st := ns.Stats(); st.Get("negative_hits") != 0 || st.Get("load.not_found") != 3 {
			t.Fatalf("negative hits %d, not-found loads %d; want 0 and 3", st.Get("negative_hits"), st.Get("load.not_found"))
		}

		// Without a shared tier: the source deletes a key this process
		// holds a copy of, then fails.
		local := newNS(t, newCache(t, holdfast.Options{Clock: clk}), "stock", holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute, NegativeTTL: -1, LoadErrorBackoff: -1})
		mustRead(t, r, local, "s1", (&countingLoader{}).Load)
		clk.Advance(2 * time.Second) // past hard, within stale-if-error
		if _, err := r.read(context.Background(), local, "s1", missing); !errors.Is(err, holdfast.ErrNotFound) {
			t.Fatalf("the source deleted the key: err %v, want ErrNotFound", err)
		}
		down := &countingLoader{err: errors.New("db down")}
		if res, err := r.read(context.Background(), local, "s1", down.Load); !errors.Is(err, down.err) {
			t.Fatalf("then the source failed: %q from %v, %v; want the load's error, not the deleted value", res.Value, res.Source, err)
		}
	})
}

// A stale value served because fresh data could not be had carries the
// reason in Result.LoadErr: the loader's error, the load timeout, or the
// limiter's refusal. Fresh answers, and stale-while-revalidate answers
// whose refresh has not failed, carry none.
func TestReadPathStaleAnswerSaysWhy(t *testing.T) {
	// setup loads p1 and leaves it past hard, within stale-if-error. Only
	// the timeout's test has a short LoadTimeout: on a busy machine one
	// of these loads could reach it, and its error would be the cause.
	setup := func(t *testing.T, r reader, opts holdfast.Options, loadTimeout time.Duration) (*holdfast.Cache, *holdfast.Namespace) {
		clk := fakeclock.New(t0)
		opts.Clock = clk
		c := newCache(t, opts)
		ns := newNS(t, c, "product", holdfast.Policy{TTL: 2 * time.Second, SoftTTL: time.Second, StaleIfError: time.Minute,
			LoadTimeout: loadTimeout, SlowLoadGrace: -1, Hot: holdfast.HotPolicy{MaxBytes: -1}})
		if res := mustRead(t, r, ns, "p1", (&countingLoader{}).Load); res.LoadErr != nil {
			t.Fatalf("a loaded answer carries LoadErr %v", res.LoadErr)
		}
		clk.Advance(1500 * time.Millisecond) // between soft and hard
		if res := mustRead(t, r, ns, "p1", (&countingLoader{}).Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonRevalidating, true) || res.LoadErr != nil {
			t.Fatalf("stale-while-revalidate: from %v with LoadErr %v; want stale, none", res.Source, res.LoadErr)
		}
		clk.Advance(3 * time.Second)
		return c, ns
	}
	staleBecause := func(t *testing.T, res holdfast.Result, err, cause error) {
		t.Helper()
		why := holdfast.ReasonSourceFailed
		if errors.Is(cause, holdfast.ErrOverloaded) {
			why = holdfast.ReasonOverloaded
		}
		if err != nil || !answered(res, holdfast.SourceMemory, why, true) || res.Value == nil {
			t.Fatalf("%q from %v, %v; want a stale-on-error value", res.Value, res.Source, err)
		}
		if !errors.Is(res.LoadErr, cause) {
			t.Fatalf("LoadErr %v, want one wrapping %v", res.LoadErr, cause)
		}
	}
	forEachReader(t, func(t *testing.T, r reader) {
		t.Run("loader error", func(t *testing.T) {
			_, ns := setup(t, r, holdfast.Options{}, 0)
			down := &countingLoader{err: errors.New("db down")}
			res, err := r.read(context.Background(), ns, "p1", down.Load)
			staleBecause(t, res, err, down.err)
			// Within the backoff no call is made; the cause is the same.
			res, err = r.read(context.Background(), ns, "p1", down.Load)
			staleBecause(t, res, err, down.err)
			if down.calls.Load() != 1 {
				t.Fatalf("loader calls = %d, want 1", down.calls.Load())
			}
		})
		t.Run("load timeout", func(t *testing.T) {
			_, ns := setup(t, r, holdfast.Options{}, 50*time.Millisecond)
			stuck := &countingLoader{gate: make(chan struct{})} // never opened
			res, err := r.read(context.Background(), ns, "p1", stuck.Load)
			staleBecause(t, res, err, context.DeadlineExceeded)
		})
		t.Run("limiter refusal", func(t *testing.T) {
			c, ns := setup(t, r, holdfast.Options{MaxConcurrentLoads: 1, LoadWait: -1}, 0)
			holder := &countingLoader{gate: make(chan struct{})}
			defer close(holder.gate)
			go ns.Get(context.Background(), "other", holder.Load)
			eventually(t, "the other key's load to hold the one slot", func() bool { return c.LoadsInFlight() == 1 })
			res, err := r.read(context.Background(), ns, "p1", (&countingLoader{}).Load)
			staleBecause(t, res, err, holdfast.ErrOverloaded)
		})
	})
}
