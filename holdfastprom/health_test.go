package holdfastprom

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// healthTier is an inmem tier that reports the health a test sets.
type healthTier struct {
	*inmem.Tier
	h atomic.Pointer[tier.Health]
}

func (h *healthTier) Health() tier.Health { return *h.h.Load() }

// exportedShared returns a registry exporting a Cache over shared.
func exportedShared(t *testing.T, shared tier.Tier) *prom.Registry {
	t.Helper()
	c, err := holdfast.New(holdfast.Options{Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	reg := prom.NewPedanticRegistry()
	if _, err := Register(reg, c); err != nil {
		t.Fatal(err)
	}
	return reg
}

// The shared tier's health is exported with the cache's counters, with no
// collector of the caller's: down with its reason and its breaker open
// before it has connected, then each node's state.
func TestSharedTierHealthExported(t *testing.T) {
	ht := &healthTier{Tier: inmem.New(nil)}
	ht.h.Store(&tier.Health{Down: true, Reason: tier.ReasonUnreachable, Breaker: tier.Breaker{State: "open"}})
	reg := exportedShared(t, ht)
	want := `
# HELP holdfast_shared_tier_up 1 while the shared tier is connected and serves calls; 0 while it is down (its breaker not closed) or not connected yet.
# TYPE holdfast_shared_tier_up gauge
holdfast_shared_tier_up 0
# HELP holdfast_shared_tier_down 1 for the reason the shared tier is down (unreachable, timeout: frozen or dropping packets, auth_refused: credentials, ACL or TLS refused); all 0 while it is not down.
# TYPE holdfast_shared_tier_down gauge
holdfast_shared_tier_down{reason="auth_refused"} 0
holdfast_shared_tier_down{reason="timeout"} 0
holdfast_shared_tier_down{reason="unreachable"} 1
# HELP holdfast_redis_breaker_state 1 for the shared tier's breaker state: closed, open (Redis skipped; also before the tier has connected) or half_open (probing).
# TYPE holdfast_redis_breaker_state gauge
holdfast_redis_breaker_state{state="closed"} 0
holdfast_redis_breaker_state{state="half_open"} 0
holdfast_redis_breaker_state{state="open"} 1
`
	names := []string{"holdfast_shared_tier_up", "holdfast_shared_tier_down", "holdfast_redis_breaker_state"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "holdfast_redis_node_state"); n != 0 {
		t.Fatalf("%d node series before connecting", n)
	}

	ht.h.Store(&tier.Health{Connected: true, Breaker: tier.Breaker{State: "closed", Opens: 2, Transitions: 4}, Nodes: []tier.Node{
		{Addr: "127.0.0.1:7000", Primary: true, State: "ejected", Requests: 10, Failures: 3, Ejections: 1, ReadShare: 0.25},
		{Addr: "127.0.0.1:7001", State: "ready", Reads: 30, ReadShare: 0.75},
	}})
	want = `
# HELP holdfast_shared_tier_up 1 while the shared tier is connected and serves calls; 0 while it is down (its breaker not closed) or not connected yet.
# TYPE holdfast_shared_tier_up gauge
holdfast_shared_tier_up 1
# HELP holdfast_redis_breaker_opens_total Times the shared tier's breaker opened.
# TYPE holdfast_redis_breaker_opens_total counter
holdfast_redis_breaker_opens_total 2
# HELP holdfast_redis_node_state 1 for the node's current state: ready, not_ready (a replica not in sync) or ejected.
# TYPE holdfast_redis_node_state gauge
holdfast_redis_node_state{addr="127.0.0.1:7000",role="primary",state="ejected"} 1
holdfast_redis_node_state{addr="127.0.0.1:7000",role="primary",state="not_ready"} 0
holdfast_redis_node_state{addr="127.0.0.1:7000",role="primary",state="ready"} 0
holdfast_redis_node_state{addr="127.0.0.1:7001",role="replica",state="ejected"} 0
holdfast_redis_node_state{addr="127.0.0.1:7001",role="replica",state="not_ready"} 0
holdfast_redis_node_state{addr="127.0.0.1:7001",role="replica",state="ready"} 1
# HELP holdfast_redis_node_failures_total Commands to the node that failed, timeouts included.
# TYPE holdfast_redis_node_failures_total counter
holdfast_redis_node_failures_total{addr="127.0.0.1:7000",role="primary"} 3
holdfast_redis_node_failures_total{addr="127.0.0.1:7001",role="replica"} 0
`
	names = []string{"holdfast_shared_tier_up", "holdfast_redis_breaker_opens_total", "holdfast_redis_node_state", "holdfast_redis_node_failures_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// A tier that does not report its health exports none.
func TestNoHealthWithoutReporter(t *testing.T) {
	reg := exportedShared(t, inmem.New(nil))
	if n := testutil.CollectAndCount(reg, "holdfast_shared_tier_up", "holdfast_redis_breaker_state"); n != 0 {
		t.Fatalf("%d health series for a tier without health", n)
	}
}
