package lab

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// The holdfast mode's shared tier: package redis with its defaults (50 ms
// read budget, 100 ms write timeout, breaker on), as a user would run it.
func init() {
	newSharedTier = func(ctx context.Context, addrs []string, dialTimeout time.Duration) (tier.Tier, func() map[string]float64, error) {
		t, err := redis.New(redis.Options{Addrs: addrs, DialTimeout: dialTimeout})
		if err != nil {
			return nil, nil, err
		}
		return t, func() map[string]float64 { return structStats("tier_", t.Stats()) }, nil
	}
	newSentinelTier = func(ctx context.Context, sentinels []string, master string) (tier.Tier, func() map[string]float64, error) {
		t, err := redis.New(redis.Options{Sentinel: redis.SentinelOptions{Addrs: sentinels, MasterName: master}})
		if err != nil {
			return nil, nil, err
		}
		return t, func() map[string]float64 { return structStats("tier_", t.Stats()) }, nil
	}
}

// nodeStats returns the per-node figures of r's Redis tier when r is the
// holdfast mode over a Cluster; ok is false for any other Reader.
func nodeStats(r Reader) (_ []redis.NodeStats, ok bool) {
	h, ok := r.(*holdfastReader)
	if !ok {
		return nil, false
	}
	t, ok := h.tier.(*redis.Tier)
	if !ok {
		return nil, false
	}
	return t.NodeStats(), true
}

// nodeStat returns addr's entry in r's node figures; ok is false when r has
// none or addr is not among them.
func nodeStat(r Reader, addr string) (redis.NodeStats, bool) {
	all, _ := nodeStats(r)
	for _, s := range all {
		if s.Addr == addr {
			return s, true
		}
	}
	return redis.NodeStats{}, false
}

// tierHealth returns probes of r's Redis tier when r is the holdfast mode:
// its breaker is closed; it sees every node of the Cluster ready (always
// true for a standalone server). Both nil for any other Reader.
func tierHealth(r Reader) (breakerClosed, nodesReady func() bool) {
	h, ok := r.(*holdfastReader)
	if !ok {
		return nil, nil
	}
	t, ok := h.tier.(*redis.Tier)
	if !ok {
		return nil, nil
	}
	return func() bool { return t.Stats().BreakerState == breaker.Closed },
		func() bool {
			for _, s := range t.NodeStats() {
				if s.State != redis.NodeReady {
					return false
				}
			}
			return true
		}
}
