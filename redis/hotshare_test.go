package redis

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// TestShareHot: two processes' hot keys make one set, the most recently
// published first; keys drop out after their TTL by the server's clock; the
// set is bounded.
func TestShareHot(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := ctxT(t, 30*time.Second)
	a := newTier(t, Options{Addrs: []string{srv.Addr()}, KeyPrefix: "hs:"})
	b := newTier(t, Options{Addrs: []string{srv.Addr()}, KeyPrefix: "hs:"})

	if got, err := a.ShareHot(ctx, "product", []string{"k1", "k2"}, 400*time.Millisecond, 10); err != nil || len(got) != 2 {
		t.Fatalf("a: %v, %v", got, err)
	}
	time.Sleep(50 * time.Millisecond)
	got, err := b.ShareHot(ctx, "product", []string{"k3"}, 400*time.Millisecond, 10)
	if err != nil || !slices.Equal(got, []string{"k3", "k2", "k1"}) {
		t.Fatalf("b: %v, %v; want k3 (newest), k2, k1", got, err)
	}
	if got, _ := b.ShareHot(ctx, "product", nil, 400*time.Millisecond, 1); !slices.Equal(got, []string{"k3"}) {
		t.Fatalf("limit 1: %v", got)
	}
	if got, _ := b.ShareHot(ctx, "stock", nil, time.Second, 10); len(got) != 0 {
		t.Fatalf("another namespace's set: %v", got)
	}
	time.Sleep(500 * time.Millisecond)
	if got, _ := a.ShareHot(ctx, "product", nil, 400*time.Millisecond, 10); len(got) != 0 {
		t.Fatalf("after the TTL: %v, want none", got)
	}

	many := make([]string, maxSharedHot+100)
	for i := range many {
		many[i] = fmt.Sprint("m", i)
	}
	if _, err := a.ShareHot(ctx, "product", many, time.Minute, 10); err != nil {
		t.Fatal(err)
	}
	if n := rawClient(t, srv.Addr()).Do(ctx, a.client.B().Zcard().Key("hs::hot:product").Build()); n.Error() != nil {
		t.Fatal(n.Error())
	} else if c, _ := n.AsInt64(); c != maxSharedHot {
		t.Fatalf("set holds %d keys, want the cap %d", c, maxSharedHot)
	}
}
