package redis

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
	"github.com/holdfast-dev/holdfast/tier/tiertest"
)

// everyCapability is what the Tier implements, in both shapes.
var everyCapability = tiertest.Capabilities{
	Coordinator: true, Refiller: true, Smearer: true, HotSharer: true, InvalidationStream: true,
}

// conformance runs tiertest over one server or Cluster: each fresh tier is
// a KeyPrefix of its own, which keeps its keys, versions, leases, hot sets
// and stream channel apart from the others'.
func conformance(t *testing.T, addrs []string) {
	conformanceWith(t, func(prefix string) Options { return conformanceOptions(addrs, prefix) })
}

// conformanceWith is conformance with the options of each fresh tier made
// by opts from its KeyPrefix.
func conformanceWith(t *testing.T, opts func(prefix string) Options) {
	var n atomic.Int64
	tiertest.Run(t, tiertest.Config{
		New: func(t *testing.T) func(*testing.T) tier.Tier {
			prefix := fmt.Sprintf("conform%d:", n.Add(1))
			return func(t *testing.T) tier.Tier {
				tr, err := New(opts(prefix))
				if err != nil {
					t.Fatal(err)
				}
				return tr
			}
		},
		Want: everyCapability,
		// A key's version and lease live in sibling keys in its Cluster
		// slot, named alike on a standalone server (coordinate.go); for a
		// key whose braces make no hash tag no such name is built, and
		// every Coordinator call of it fails.
		CoordinatorRefuses:    brokenHashTag,
		CoordinatorRefusesWhy: "its braces make no hash tag, so the tier builds no version or lease key in its slot",
	})
}

// brokenHashTag reports whether key has a brace but no hash tag (a '{'
// followed later by a '}' with something between them).
func brokenHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return strings.IndexByte(key, '}') >= 0
	}
	closing := strings.IndexByte(key[open+1:], '}')
	return closing <= 0
}

// conformanceOptions are the defaults with budgets of seconds: the suite
// checks what the tier answers, and a call that outlasts a 50 ms read
// budget on a loaded machine fails as the tier is meant to (the budgets
// have tests of their own), which would tell the suite nothing.
func conformanceOptions(addrs []string, prefix string) Options {
	const budget = 5 * time.Second
	return Options{
		Addrs:        addrs,
		KeyPrefix:    prefix,
		ReadBudget:   budget,
		WriteTimeout: budget,
		DialTimeout:  budget,
		PingTimeout:  budget,
		Cluster:      ClusterOptions{SilentConnTimeout: budget},
	}
}

func TestConformanceStandalone(t *testing.T) {
	conformance(t, []string{redistest.Standalone(t).Addr()})
}

func TestConformanceCluster(t *testing.T) {
	conformance(t, redistest.Cluster(t).Addrs())
}

// TestConformanceSentinel runs the suite against the primary of a Sentinel
// group, found through its three sentinels.
func TestConformanceSentinel(t *testing.T) {
	g := redistest.Sentinel(t)
	conformanceWith(t, func(prefix string) Options {
		o := conformanceOptions(nil, prefix)
		o.Sentinel = SentinelOptions{Addrs: g.SentinelAddrs(), MasterName: g.MasterName()}
		return o
	})
}
