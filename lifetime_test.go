package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
	"github.com/holdfast-dev/holdfast/tier"
)

// A value its loader gives 1 s in a namespace whose TTL is a minute is
// loaded again after 1 s, whichever tier held it: the hot tier, the shared
// tier (another process's read) and last-known-good all follow it.
func TestLoaderSetLifetimeInEveryTier(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	// SlowLoadGrace runs on real time: on a busy machine a reader holding
	// a copy within stale-if-error (last-known-good's, with the shared
	// tier down) could answer with it before the load it is testing ends.
	p := holdfast.Policy{TTL: time.Minute, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{Threshold: -1}, SlowLoadGrace: -1}
	a := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	b := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	var loads atomic.Int64
	short := func(ctx context.Context, key string) ([]byte, error) {
		n := loads.Add(1)
		if key == "low-stock" && !holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: time.Second}) {
			t.Error("SetLifetime refused in a loader")
		}
		return fmt.Appendf(nil, "v%d", n), nil
	}
	mustGet(t, a, "low-stock", short)
	mustGet(t, a, "plenty", short)
	if raw, ok := shared.Raw("product:low-stock"); !ok {
		t.Fatal("not in the shared tier")
	} else if e, _ := tier.DecodeEntry(raw); e.Hard.Sub(e.Origin) != time.Second || e.Soft.Sub(e.Origin) != time.Second {
		t.Fatalf("stored with soft %v, hard %v after origin; want 1 s", e.Soft.Sub(e.Origin), e.Hard.Sub(e.Origin))
	}
	if res := mustGet(t, b, "low-stock", short); res.Source != holdfast.SourceShared {
		t.Fatalf("b's first read from %v, want the shared tier", res.Source)
	}
	if res := mustGet(t, a, "low-stock", short); res.Source != holdfast.SourceHot {
		t.Fatalf("a's second read from %v, want the hot tier", res.Source)
	}
	clk.Advance(1100 * time.Millisecond)
	before := loads.Load()
	// a's hot copy and the shared copy are past their 1 s: a loads; b's
	// hot copy is too, and b reads what a stored.
	if res := mustGet(t, a, "low-stock", short); res.Source != holdfast.SourceLoaded {
		t.Fatalf("a after 1.1 s: %q from %v, want a load (its lifetime was 1 s)", res.Value, res.Source)
	}
	if res := mustGet(t, b, "low-stock", short); res.Source != holdfast.SourceShared || string(res.Value) != "v3" {
		t.Fatalf("b after 1.1 s: %q from %v, want a's new load v3 from the shared tier", res.Value, res.Source)
	}
	for _, ns := range []*holdfast.Namespace{a, b} {
		if res := mustGet(t, ns, "plenty", short); res.Source == holdfast.SourceLoaded {
			t.Fatal("a value without a lifetime of its own was loaded again after 1.1 s")
		}
	}
	if loads.Load()-before != 1 {
		t.Fatalf("%d loads after 1.1 s, want 1", loads.Load()-before)
	}
	// With the shared tier down, last-known-good follows the lifetime too.
	clk.Advance(1100 * time.Millisecond)
	shared.Fail(inmem.ErrInjected)
	if res := mustGet(t, b, "low-stock", short); res.Source != holdfast.SourceLoaded {
		t.Fatalf("b, shared tier down, after the value's 1 s: %q from %v, want a load", res.Value, res.Source)
	}
	if st := a.Stats(); st.Get("lifetimes.set") != 2 || st.Get("lifetimes.clamped") != 0 {
		t.Fatalf("lifetimes set %d, clamped %d", st.Get("lifetimes.set"), st.Get("lifetimes.clamped"))
	}
}

// Out of the namespace's bounds a lifetime is clamped and counted; the
// batch loader and Typed's loaders set lifetimes the same way.
func TestLoaderSetLifetimeBoundsBatchAndTyped(t *testing.T) {
	clk := fakeclock.New(t0)
	p := holdfast.Policy{TTL: time.Minute, Lifetime: holdfast.LifetimeBounds{Min: 2 * time.Second}}
	ns := newNS(t, newCache(t, holdfast.Options{Clock: clk}), "product", p)
	batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := map[string][]byte{}
		for _, k := range keys {
			out[k] = []byte(k)
		}
		holdfast.SetLifetime(ctx, "short", holdfast.Lifetime{TTL: 10 * time.Millisecond}) // clamped to 2 s
		holdfast.SetLifetime(ctx, "long", holdfast.Lifetime{TTL: time.Hour})              // clamped to 1 min
		holdfast.SetLifetime(ctx, "mid", holdfast.Lifetime{TTL: 5 * time.Second, SoftTTL: 3 * time.Second})
		if holdfast.SetLifetime(ctx, "not-asked", holdfast.Lifetime{TTL: time.Second}) {
			t.Error("SetLifetime accepted a key the load was not for")
		}
		return out, nil
	}
	res, errs := ns.GetMany(context.Background(), []string{"short", "long", "mid", "policy"}, batch)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	want := []struct{ soft, hard time.Duration }{{2 * time.Second, 2 * time.Second}, {time.Minute, time.Minute}, {3 * time.Second, 5 * time.Second}, {time.Minute, time.Minute}}
	for i, r := range res {
		if soft, hard := r.Soft().Sub(r.Origin()), r.Hard().Sub(r.Origin()); soft != want[i].soft || hard != want[i].hard {
			t.Errorf("key %d: soft %v hard %v, want %v %v", i, soft, hard, want[i].soft, want[i].hard)
		}
	}
	if st := ns.Stats(); st.Get("lifetimes.set") != 3 || st.Get("lifetimes.clamped") != 2 {
		t.Fatalf("lifetimes set %d, clamped %d; want 3, 2", st.Get("lifetimes.set"), st.Get("lifetimes.clamped"))
	}

	type stock struct{ Left int }
	typed := holdfast.NewTyped[stock](newNS(t, newCache(t, holdfast.Options{Clock: clk}), "stock", holdfast.Policy{TTL: time.Minute}), nil)
	_, r, err := typed.Get(context.Background(), "7", func(ctx context.Context, key string) (stock, error) {
		s := stock{Left: 2}
		if s.Left < 5 {
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: 5 * time.Second})
		}
		return s, nil
	})
	if err != nil || r.Hard().Sub(r.Origin()) != 5*time.Second {
		t.Fatalf("Typed: hard %v after origin, err %v; want 5 s", r.Hard().Sub(r.Origin()), err)
	}
}

// A loader sets a value's own stale-if-error window: shorter, none, or
// longer than the policy's up to Lifetime.MaxStaleIfError (longer is
// clamped and counted). The window travels in the value's envelope, so last-
// known-good in the loading process and the shared tier's copy read by
// another process both end it where the loader said.
func TestLoaderSetStaleIfError(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	p := holdfast.Policy{TTL: time.Minute, StaleIfError: time.Minute, Lifetime: holdfast.LifetimeBounds{MaxStaleIfError: time.Hour},
		Hot: holdfast.HotPolicy{MaxBytes: -1}}
	a := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	b := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	windows := map[string]time.Duration{"short": 5 * time.Second, "long": 30 * time.Minute, "none": -1, "clamped": 2 * time.Hour}
	var failing atomic.Bool
	load := func(ctx context.Context, key string) ([]byte, error) {
		if failing.Load() {
			return nil, errors.New("source down")
		}
		if w, ok := windows[key]; ok {
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: 10 * time.Second, StaleIfError: w})
		} else {
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: 10 * time.Second})
		}
		return []byte("v-" + key), nil
	}
	keys := []string{"short", "long", "none", "clamped", "policy"}
	for _, k := range keys {
		mustGet(t, a, k, load)
	}
	wantStale := map[string]time.Duration{"short": 5 * time.Second, "long": 30 * time.Minute, "none": 0, "clamped": time.Hour}
	for _, k := range keys {
		raw, ok := shared.Raw("product:" + k)
		if !ok {
			t.Fatalf("%s: not in the shared tier", k)
		}
		e, err := tier.DecodeEntry(raw)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		w, own := wantStale[k]
		if !own {
			if !e.Stale.IsZero() || raw[2] != 1 {
				t.Fatalf("%s: stale %v, version %d; a value without a window of its own is written as version 1", k, e.Stale, raw[2])
			}
			continue
		}
		if got := e.Stale.Sub(e.Hard); got != w {
			t.Fatalf("%s: stale-if-error window %v in the envelope, want %v", k, got, w)
		}
	}
	if st := a.Stats(); st.Get("lifetimes.set") != 5 || st.Get("lifetimes.clamped") != 1 {
		t.Fatalf("lifetimes set %d, clamped %d; want 5, 1", st.Get("lifetimes.set"), st.Get("lifetimes.clamped"))
	}
	failing.Store(true)
	// check reads key on ns at the clock's time: a stale answer from src
	// when want says so, else the load's error.
	check := func(when string, ns *holdfast.Namespace, src holdfast.Source, want map[string]bool) {
		t.Helper()
		for _, k := range keys {
			res, err := ns.Get(context.Background(), k, load)
			if want[k] {
				if err != nil || !answered(res, src, holdfast.ReasonSourceFailed, true) || string(res.Value) != "v-"+k {
					t.Errorf("%s, %s: %q from %v, err %v; want the stale value", when, k, res.Value, res.Source, err)
				}
			} else if err == nil {
				t.Errorf("%s, %s: %q from %v; want the load's error, its window is over", when, k, res.Value, res.Source)
			}
		}
	}
	// 10 s + 6 s after the load: past "short"'s 5 s and "none"'s window.
	clk.Advance(16 * time.Second)
	check("b from the shared tier at 16 s", b, holdfast.SourceShared, map[string]bool{"long": true, "clamped": true, "policy": true})
	shared.Fail(inmem.ErrInjected)
	check("a from last-known-good at 16 s", a, holdfast.SourceMemory, map[string]bool{"long": true, "clamped": true, "policy": true})
	// Past the policy's minute, within "long"'s 30 minutes and the clamped hour.
	clk.Advance(2 * time.Minute)
	check("a from last-known-good at 2 min", a, holdfast.SourceMemory, map[string]bool{"long": true, "clamped": true})
	clk.Advance(35 * time.Minute)
	check("a from last-known-good at 37 min", a, holdfast.SourceMemory, map[string]bool{"clamped": true})
	clk.Advance(30 * time.Minute)
	check("a from last-known-good at 67 min", a, holdfast.SourceMemory, map[string]bool{})
}

// Read-your-invalidations holds for a value whose loader gave it a lifetime
// longer than the policy's TTL: this process remembers its invalidation as
// long as such a value could be served, not only the policy's TTL plus
// StaleIfError.
func TestOwnInvalidationOutlastsALongerLoaderSetLifetime(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	p := holdfast.Policy{TTL: time.Minute, Lifetime: holdfast.LifetimeBounds{Max: 10 * time.Minute}, Hot: holdfast.HotPolicy{MaxBytes: -1}}
	ns := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	var loads atomic.Int64
	load := func(ctx context.Context, key string) ([]byte, error) {
		holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: 10 * time.Minute})
		return fmt.Appendf(nil, "v%d", loads.Add(1)), nil
	}
	mustGet(t, ns, "k", load)
	old, ok := shared.Raw("product:k")
	if !ok {
		t.Fatal("setup: nothing stored")
	}
	clk.Advance(time.Second)
	if err := ns.Invalidate(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	// A node that never saw the invalidation answers with the old value,
	// which its loader gave 10 minutes, two minutes later.
	clk.Advance(2 * time.Minute)
	shared.Put("product:k", old, 8*time.Minute)
	if res := mustGet(t, ns, "k", load); string(res.Value) != "v2" {
		t.Fatalf("2 min after invalidating: %q from %v; want v2 loaded, never the value from before the invalidation", res.Value, res.Source)
	}
}
