package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// BenchmarkClusterGetHit compares, on one 3+3 Cluster in the same run, the
// tier's Get with per-node health and random routing over primaries and
// ready replicas ("nodes"), the tier with it Disabled (rueidis's routing to
// primaries), and a raw rueidis Cluster GET with the same 50 ms deadline.
// 512-byte values over 1,000 keys, 64 goroutines in all.
func BenchmarkClusterGetHit(b *testing.B) {
	cl := redistest.Cluster(b)
	ctx := context.Background()
	val := []byte(strings.Repeat("x", 512))
	nodes, err := New(Options{Addrs: cl.Addrs()})
	if err != nil {
		b.Fatal(err)
	}
	defer nodes.Close()
	plain, err := New(Options{Addrs: cl.Addrs(), Cluster: ClusterOptions{Disabled: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	const keys = 1000
	names := make([]string, keys)
	items := make([]tier.Item, keys)
	for i := range items {
		names[i] = "ns:" + strings.Repeat("k", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		items[i] = tier.Item{Key: names[i], Value: val, TTL: time.Hour}
	}
	if err := plain.Set(ctx, items...); err != nil {
		b.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * DefaultReadinessInterval) // replicas polled ready
	procs := 64 / max(1, testingProcs())
	for _, c := range []struct {
		name string
		get  func(k string) error
	}{
		{"nodes", func(k string) error { _, _, err := nodes.Get(ctx, k); return err }},
		{"disabled", func(k string) error { _, _, err := plain.Get(ctx, k); return err }},
		{"rueidis", func(k string) error {
			rctx, cancel := context.WithTimeout(ctx, DefaultReadBudget)
			defer cancel()
			return raw.Do(rctx, raw.B().Get().Key(k).Build()).Error()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(procs)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					if err := c.get(names[i%keys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
