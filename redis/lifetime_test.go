package redis

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The shared tier's TTL follows a lifetime the loader set: a value given
// 1 s in a namespace whose TTL is an hour expires from Redis 1 s (plus
// StaleIfError) after its load, not an hour; a stale-if-error window the
// loader set replaces the policy's in the TTL.
func TestLoaderSetLifetimeIsRedisTTL(t *testing.T) {
	srv := redistest.Standalone(t)
	rc := rawClient(t, srv.Addr())
	p := holdfast.Policy{TTL: time.Hour, StaleIfError: 2 * time.Second, Lifetime: holdfast.LifetimeBounds{MaxStaleIfError: time.Minute}}
	ns := newCacheOn(t, Options{Addrs: []string{srv.Addr()}}, p, nil)
	load := func(ctx context.Context, key string) ([]byte, error) {
		switch key {
		case "low-stock":
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: time.Second})
		case "long-window":
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: time.Second, StaleIfError: 30 * time.Second})
		case "no-window":
			holdfast.SetLifetime(ctx, key, holdfast.Lifetime{TTL: time.Second, StaleIfError: -1})
		}
		return []byte("v"), nil
	}
	ctx := context.Background()
	for _, k := range []string{"low-stock", "plenty", "long-window", "no-window"} {
		if _, err := ns.Get(ctx, k, load); err != nil {
			t.Fatal(err)
		}
	}
	pttl := func(key string) time.Duration {
		var ms int64
		deadline := time.Now().Add(5 * time.Second)
		for ms <= 0 && time.Now().Before(deadline) { // the write follows the answer
			ms, _ = rc.Do(ctx, rc.B().Pttl().Key(key).Build()).AsInt64()
			time.Sleep(time.Millisecond)
		}
		return time.Duration(ms) * time.Millisecond
	}
	if d := pttl("product:low-stock"); d <= 0 || d > 3*time.Second {
		t.Fatalf("low-stock's Redis TTL %v, want at most its 1 s + 2 s stale-if-error", d)
	}
	if d := pttl("product:long-window"); d < 25*time.Second || d > 31*time.Second {
		t.Fatalf("long-window's Redis TTL %v, want its 1 s + the 30 s stale-if-error window it was given", d)
	}
	if d := pttl("product:no-window"); d <= 0 || d > time.Second {
		t.Fatalf("no-window's Redis TTL %v, want its 1 s and no stale-if-error window", d)
	}
	if d := pttl("product:plenty"); d < 59*time.Minute {
		t.Fatalf("plenty's Redis TTL %v, want the policy's hour", d)
	}
}
