package redis_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/redis"
)

// A Tier is usually handed to the Cache as its shared tier; used directly,
// it reports hit, miss and failure apart, and an open breaker as a bypass.
// (Compiled, not run: it needs a Redis server.)
func ExampleNew() {
	tier, err := redis.New(redis.Options{
		Addrs:     []string{"127.0.0.1:7000"}, // one node is enough to find a whole Cluster
		KeyPrefix: "shop:",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer tier.Close()

	ctx := context.Background()
	_ = tier.Set(ctx, holdfast.Item{Key: "product:42", Value: []byte("..."), TTL: 35 * time.Minute})
	v, found, err := tier.Get(ctx, "product:42")
	switch {
	case errors.Is(err, holdfast.ErrBypassed):
		log.Print("breaker open: Redis skipped")
	case err != nil:
		log.Printf("Redis failed or took longer than 50 ms: %v", err)
	case !found:
		log.Print("miss")
	default:
		log.Printf("hit: %d bytes", len(v))
	}
}
