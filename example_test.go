package holdfast_test

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
)

func Example() {
	cache, err := holdfast.New(holdfast.Options{
		Shared:             inmem.New(nil), // redis.New(...) in production
		MaxConcurrentLoads: 4,              // database slots for cache misses
	})
	if err != nil {
		panic(err)
	}
	defer cache.Close()

	stock, err := cache.Namespace("stock", holdfast.Policy{
		TTL:          5 * time.Second, // hard: never served as current after this
		SoftTTL:      3 * time.Second, // soft: refreshed in the background after this
		StaleIfError: 5 * time.Second, // served this much past hard if the database fails
		// With a shared tier only keys read often enough to be hot are
		// kept in process memory by default; a negative Threshold keeps
		// every key.
		Hot: holdfast.HotPolicy{Threshold: -1},
	})
	if err != nil {
		panic(err)
	}
	load := func(ctx context.Context, key string) ([]byte, error) {
		return []byte(`{"available":12}`), nil // SELECT ... FROM stock WHERE id = $1
	}
	for range 2 {
		res, err := stock.Get(context.Background(), "42", load)
		fmt.Println(string(res.Value), res.Source, err)
	}
	// The second read comes from this process's hot tier.

	// Output:
	// {"available":12} loaded <nil>
	// {"available":12} hot <nil>
}
