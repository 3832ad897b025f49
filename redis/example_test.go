package redis_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// A Tier is usually handed to the Cache as its shared tier; used directly,
// it reports hit, miss and failure apart, and an open breaker as a bypass.
// (Compiled, not run: it needs a Redis server.)
func ExampleNew() {
	rt, err := redis.New(redis.Options{
		Addrs:     []string{"127.0.0.1:7000"}, // one node is enough to find a whole Cluster
		KeyPrefix: "shop:",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	ctx := context.Background()
	_ = rt.Set(ctx, tier.Item{Key: "product:42", Value: []byte("..."), TTL: 35 * time.Minute})
	v, found, err := rt.Get(ctx, "product:42")
	switch {
	case errors.Is(err, tier.ErrBypassed):
		log.Print("breaker open: Redis skipped")
	case err != nil:
		log.Printf("Redis failed or took longer than 50 ms: %v", err)
	case !found:
		log.Print("miss")
	default:
		log.Printf("hit: %d bytes", len(v))
	}
}
