package redis

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// BenchmarkGetHit compares the tier's Get with a raw rueidis GET (same
// 50 ms deadline) on the same server in the same run: 512-byte values, 64
// goroutines in all. The tier's share of the cost is the ratio of the two.
func BenchmarkGetHit(b *testing.B) {
	srv := redistest.Standalone(b)
	ctx := context.Background()
	val := []byte(strings.Repeat("x", 512))
	tr, err := New(Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Set(ctx, tier.Item{Key: "ns:k", Value: val, TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	procs := 64 / max(1, testingProcs())

	b.Run("tier", func(b *testing.B) {
		b.SetParallelism(procs)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, ok, err := tr.Get(ctx, "ns:k"); err != nil || !ok {
					b.Error(ok, err, tr.Stats())
					return
				}
			}
		})
	})
	b.Run("rueidis", func(b *testing.B) {
		b.SetParallelism(procs)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rctx, cancel := context.WithTimeout(ctx, DefaultReadBudget)
				_, err := raw.Do(rctx, raw.B().Get().Key("ns:k").Build()).AsBytes()
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func testingProcs() int { return runtime.GOMAXPROCS(0) }
