package redis

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/tier"
)

// A service started while Redis is down serves from its own tiers, queues
// its invalidations, and uses Redis once it comes up.
func TestLazyStartsWithRedisDown(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	l, err := NewLazy(Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c, err := holdfast.New(holdfast.Options{Shared: l, Logger: quiet, ReplayInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns, _ := c.Namespace("product", holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}, StaleIfError: time.Minute})
	load := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
	ctx := context.Background()
	if _, _, err := l.Get(ctx, "k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("before connecting: err = %v, want ErrBypassed", err)
	}
	start := time.Now()
	if res, err := ns.Get(ctx, "1", load); err != nil || string(res.Value) != "v" {
		t.Fatalf("read with Redis down: %q %v", res.Value, err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("a read waited for Redis")
	}
	if err := ns.Invalidate(ctx, "2"); err != nil {
		t.Fatalf("invalidate with Redis down: %v (want it queued)", err)
	}
	srv.Restart()
	if err := l.WaitConnected(ctxT(t, 20*time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ns.Stats().Get("replayed_deletes") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the queued invalidation was not replayed: %+v", ns.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// After connecting, a load is written to Redis. The first reads of a
	// freshly dialled pool can outlast the read budget on a loaded machine,
	// and a load whose read failed is not written (its version is unknown),
	// so fresh keys are tried until one is written, for at most 10 s.
	deadline = time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		key := "3-" + strconv.Itoa(i)
		if _, err := ns.Get(ctx, key, load); err != nil {
			t.Fatalf("read after connecting: %v", err)
		}
		for testhook.Loading(ns, key) {
			time.Sleep(time.Millisecond)
		}
		_, found, err := l.Get(ctx, "product:"+key)
		if err == nil && found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after connecting, %d loads were not written to Redis: %v %v; %+v", i+1, found, err, ns.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLazyHasTheTiersCapabilities: the Cache probes a shared tier's
// optional interfaces once, at holdfast.New, so a Lazy that lacks one the
// Tier has loses that capability for the life of the Cache, with no error.
func TestLazyHasTheTiersCapabilities(t *testing.T) {
	capabilities := []reflect.Type{
		reflect.TypeFor[tier.Tier](),
		reflect.TypeFor[tier.Coordinator](),
		reflect.TypeFor[tier.Refiller](),
		reflect.TypeFor[tier.Smearer](),
		reflect.TypeFor[tier.HotSharer](),
		reflect.TypeFor[tier.InvalidationStream](),
		reflect.TypeFor[tier.HealthReporter](),
	}
	tierT, lazyT := reflect.TypeFor[*Tier](), reflect.TypeFor[*Lazy]()
	for _, c := range capabilities {
		if !tierT.Implements(c) {
			t.Errorf("*Tier does not implement %v: the list above is out of date", c)
			continue
		}
		if !lazyT.Implements(c) {
			t.Errorf("*Lazy does not implement %v, which *Tier does", c)
		}
	}
}
