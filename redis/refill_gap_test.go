package redis_test

// Write-backs of copies this process loaded while Redis could not take
// them: a key first read in the outage, and a key whose newer load's write
// failed while Redis still holds an older load past its hard time.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// recovered waits until every process reaches Redis with its breaker
// closed and hears the stream again.
func recovered(t *testing.T, ps ...refillProcess) {
	t.Helper()
	for _, p := range ps {
		eventually(t, 10*time.Second, func() bool {
			_, _, err := p.tier.Get(context.Background(), "product:probe")
			return err == nil && p.tier.Stats().BreakerState == redis.BreakerClosed && testhook.StreamHeard(p.cache)
		})
	}
}

// originInRedis returns the origin of the load Redis holds for key.
func originInRedis(t *testing.T, tr *redis.Tier, key string) time.Time {
	t.Helper()
	v, found, err := tr.Get(context.Background(), "product:"+key)
	if err != nil || !found {
		t.Fatalf("Redis holds no %s: %v", key, err)
	}
	e, err := tier.DecodeEntry(v)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return e.Origin
}

// A key first read while Redis is down, the stream lost, is loaded then.
// Redis comes back empty: that copy is written back as the copy loaded
// before the outage is, and neither loads again.
func TestRefillCopyLoadedDuringOutage(t *testing.T) {
	srv := redistest.Standalone(t)
	p := newRefillProcess(t, srv, nil)
	src := &versioned{}
	fill(t, []refillProcess{p}, src, 1)
	ctx := context.Background()

	srv.Kill()
	eventually(t, 10*time.Second, func() bool { return !testhook.StreamHeard(p.cache) })
	res, err := p.ns.Get(ctx, refillKey(1), src.Load)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != holdfast.SourceLoaded {
		t.Fatalf("%s first read in the outage answered from %v (%v), want a load", refillKey(1), res.Source, res.Reason)
	}
	eventually(t, 10*time.Second, func() bool { return !testhook.Loading(p.ns, refillKey(1)) })
	loads := src.loads.Load()
	srv.Restart()
	recovered(t, p)

	for i := range 2 {
		k := refillKey(i)
		res, err := p.ns.Get(ctx, k, src.Load)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Value) != src.current(k) {
			t.Errorf("%s = %q, want %q", k, res.Value, src.current(k))
		}
		if cur, _ := inRedis(t, p.tier, src, k); !cur {
			t.Errorf("Redis does not hold %s's current value after the read", k)
		}
	}
	if n := src.loads.Load() - loads; n != 0 {
		t.Errorf("%d loads after the restart, want 0", n)
	}
	if n := p.ns.Stats().Get("refills"); n != 2 {
		t.Errorf("%d write-backs, want 2", n)
	}
}

// refillOverPolicy: a value past its hard time within seconds, kept in
// Redis for stale-if-error a minute longer.
var refillOverPolicy = holdfast.Policy{TTL: 3 * time.Second, SoftTTL: 2500 * time.Millisecond, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}, SlowReadGrace: -1}

// loadInFreeze loads key into p, then freezes Redis past that load's hard
// time and reads key again, which loads it anew while Redis takes no
// write; then thaws Redis and waits until p reaches it and hears the
// stream. Redis then holds the first load, past its hard time, and p the
// second.
func loadInFreeze(t *testing.T, srv *redistest.Server, p refillProcess, src *versioned, key string) (first, second holdfast.Result) {
	t.Helper()
	ctx := context.Background()
	first, err := p.ns.Get(ctx, key, src.Load)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return !testhook.Loading(p.ns, key) })
	srv.Freeze()
	thawed := false
	defer func() {
		if !thawed {
			srv.Thaw()
		}
	}()
	eventually(t, 10*time.Second, func() bool { return !testhook.StreamHeard(p.cache) })
	time.Sleep(time.Until(first.Hard()) + 50*time.Millisecond)
	if second, err = p.ns.Get(ctx, key, src.Load); err != nil {
		t.Fatal(err)
	}
	if second.Source != holdfast.SourceLoaded {
		t.Fatalf("the read past the hard time answered from %v (%v), want a load", second.Source, second.Reason)
	}
	eventually(t, 10*time.Second, func() bool { return !testhook.Loading(p.ns, key) })
	srv.Thaw()
	thawed = true
	recovered(t, p)
	if !first.Origin().Equal(originInRedis(t, p.tier, key)) {
		t.Fatal("Redis does not hold the first load: not the state this test is about")
	}
	if time.Now().After(second.Soft()) {
		t.Fatal("the second load is past its soft time already: the machine is too slow for this test")
	}
	return first, second
}

// Redis holds an older load of the key past its hard time, which it keeps
// for stale-if-error, and this process a newer one it loaded while Redis
// was frozen: the newer copy is written back over the older one, not
// loaded a third time.
func TestRefillOverAnOlderLoadPastItsHardTime(t *testing.T) {
	srv := redistest.Standalone(t)
	p := newRefillProcessWith(t, srv, nil, refillOverPolicy)
	src := &versioned{}
	_, second := loadInFreeze(t, srv, p, src, "k0")
	loads := src.loads.Load()

	res, err := p.ns.Get(context.Background(), "k0", src.Load)
	if err != nil {
		t.Fatal(err)
	}
	if n := src.loads.Load() - loads; n != 0 {
		t.Fatalf("%d loads after Redis thawed (%v, %v), want 0", n, res.Source, res.Reason)
	}
	if !res.Origin().Equal(second.Origin()) || string(res.Value) != src.current("k0") {
		t.Fatalf("answered %q loaded at %v, want the second load %q at %v", res.Value, res.Origin(), src.current("k0"), second.Origin())
	}
	if got := originInRedis(t, p.tier, "k0"); !got.Equal(second.Origin()) {
		t.Fatalf("Redis holds the load of %v, want the second load's %v", got, second.Origin())
	}
	if n := p.ns.Stats().Get("refills"); n != 1 {
		t.Fatalf("%d write-backs, want 1", n)
	}
}

// hookedOver runs before ahead of the first write-back over an older load.
type hookedOver struct {
	*redis.Tier
	once   sync.Once
	ran    atomic.Bool
	before func()
}

func (h *hookedOver) RefillOver(ctx context.Context, it tier.Item, over []byte) (bool, []byte, error) {
	h.once.Do(func() { h.before(); h.ran.Store(true) })
	return h.Tier.RefillOver(ctx, it, over)
}

// Another process invalidates the key between this one's check of its
// newer copy and the write-back over the older load: Redis refuses the
// write-back, and the read loads the new value.
func TestRefillOverRaceWithAnotherProcessInvalidation(t *testing.T) {
	srv := redistest.Standalone(t)
	b := newRefillProcessWith(t, srv, nil, refillOverPolicy)
	src := &versioned{}
	var hook *hookedOver
	a := newRefillProcessWith(t, srv, func(tr *redis.Tier) tier.Tier {
		hook = &hookedOver{Tier: tr, before: invalidateIn(t, b, src, "k0")}
		return hook
	}, refillOverPolicy)
	loadInFreeze(t, srv, a, src, "k0")
	recovered(t, b)
	loads := src.loads.Load()

	res, err := a.ns.Get(context.Background(), "k0", src.Load)
	if err != nil {
		t.Fatal(err)
	}
	refusedAndLoaded(t, a, b, src, "k0", res, hook.ran.Load(), loads)
}
