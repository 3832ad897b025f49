package lab

import (
	"context"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/redis"
)

// The holdfast mode's shared tier: package redis with its defaults (50 ms
// read budget, 100 ms write timeout, breaker on), as a user would run it.
func init() {
	newSharedTier = func(ctx context.Context, addrs []string) (holdfast.Tier, func() map[string]float64, error) {
		t, err := redis.New(redis.Options{Addrs: addrs})
		if err != nil {
			return nil, nil, err
		}
		return t, func() map[string]float64 { return structStats("tier_", t.Stats()) }, nil
	}
}
