package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
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
	ns, _ := c.Namespace("product", holdfast.Policy{Hot: holdfast.HotPolicy{Disabled: true}, StaleIfError: time.Minute})
	load := holdfast.LoaderFunc(func(context.Context, string) ([]byte, error) { return []byte("v"), nil })
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
	for ns.Stats().ReplayedDeletes == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the queued invalidation was not replayed: %+v", ns.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	ns.Get(ctx, "3", load)
	for ns.Loading("3") {
		time.Sleep(time.Millisecond)
	}
	if _, found, err := l.Get(ctx, "product:3"); err != nil || !found {
		t.Fatalf("after connecting, the load was not written to Redis: %v %v", found, err)
	}
}
