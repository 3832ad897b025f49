package holdfastprom

import (
	"github.com/holdfast-dev/holdfast/tier"
	prom "github.com/prometheus/client_golang/prometheus"
)

// The shared tier's health, as the tier reports it (holdfast.Cache.SharedHealth):
// whether it serves, its breaker, its nodes. A tier that connects in the
// background reports itself down with its breaker open until it has
// connected, so an alert on either fires when Redis is missing at deploy.

// breakerStates are the values of the state label of
// holdfast_redis_breaker_state.
var breakerStates = []string{"closed", "open", "half_open"}

// downReasons are the values of the reason label of
// holdfast_shared_tier_down.
var downReasons = []string{tier.ReasonUnreachable, tier.ReasonTimeout, tier.ReasonAuthRefused}

// nodeStates are the values of the state label of holdfast_redis_node_state.
var nodeStates = []string{"ready", "not_ready", "ejected"}

// healthMetrics are the descriptions of the shared tier's health. Node
// addresses are label values: a cluster has tens of nodes, not an unbounded
// number.
type healthMetrics struct {
	up, down, breaker, opens, transitions       *prom.Desc
	requests, failures, timeouts, reads, ejects *prom.Desc
	share, nodeState                            *prom.Desc
}

func newHealthMetrics() *healthMetrics {
	d := func(name, help string, labels ...string) *prom.Desc {
		return prom.NewDesc("holdfast_redis_node_"+name, help, append([]string{"addr", "role"}, labels...), nil)
	}
	return &healthMetrics{
		up:          prom.NewDesc("holdfast_shared_tier_up", "1 while the shared tier is connected and serves calls; 0 while it is down (its breaker not closed) or not connected yet.", nil, nil),
		down:        prom.NewDesc("holdfast_shared_tier_down", "1 for the reason the shared tier is down (unreachable, timeout: frozen or dropping packets, auth_refused: credentials, ACL or TLS refused); all 0 while it is not down.", []string{"reason"}, nil),
		breaker:     prom.NewDesc("holdfast_redis_breaker_state", "1 for the shared tier's breaker state: closed, open (Redis skipped; also before the tier has connected) or half_open (probing).", []string{"state"}, nil),
		opens:       prom.NewDesc("holdfast_redis_breaker_opens_total", "Times the shared tier's breaker opened.", nil, nil),
		transitions: prom.NewDesc("holdfast_redis_breaker_transitions_total", "State changes of the shared tier's breaker.", nil, nil),
		requests:    d("requests_total", "Commands sent to the node."),
		failures:    d("failures_total", "Commands to the node that failed, timeouts included."),
		timeouts:    d("timeouts_total", "Commands to the node past their budget."),
		reads:       d("reads_total", "Keys the node answered."),
		ejects:      d("ejections_total", "Times the node was ejected."),
		share:       d("read_share", "The node's share of the reads of all nodes."),
		nodeState:   d("state", "1 for the node's current state: ready, not_ready (a replica not in sync) or ejected.", "state"),
	}
}

func (m *healthMetrics) describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{m.up, m.down, m.breaker, m.opens, m.transitions, m.requests, m.failures, m.timeouts, m.reads, m.ejects, m.share, m.nodeState} {
		ch <- d
	}
}

func gaugeOf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *healthMetrics) collect(ch chan<- prom.Metric, h tier.Health) {
	ch <- prom.MustNewConstMetric(m.up, prom.GaugeValue, gaugeOf(!h.Down && h.Connected))
	for _, r := range downReasons {
		ch <- prom.MustNewConstMetric(m.down, prom.GaugeValue, gaugeOf(h.Down && r == h.Reason), r)
	}
	for _, s := range breakerStates {
		ch <- prom.MustNewConstMetric(m.breaker, prom.GaugeValue, gaugeOf(s == h.Breaker.State), s)
	}
	ch <- prom.MustNewConstMetric(m.opens, prom.CounterValue, float64(h.Breaker.Opens))
	ch <- prom.MustNewConstMetric(m.transitions, prom.CounterValue, float64(h.Breaker.Transitions))
	for _, n := range h.Nodes {
		role := "replica"
		if n.Primary {
			role = "primary"
		}
		for _, c := range []struct {
			d *prom.Desc
			v uint64
		}{{m.requests, n.Requests}, {m.failures, n.Failures}, {m.timeouts, n.Timeouts}, {m.reads, n.Reads}, {m.ejects, n.Ejections}} {
			ch <- prom.MustNewConstMetric(c.d, prom.CounterValue, float64(c.v), n.Addr, role)
		}
		ch <- prom.MustNewConstMetric(m.share, prom.GaugeValue, n.ReadShare, n.Addr, role)
		for _, s := range nodeStates {
			ch <- prom.MustNewConstMetric(m.nodeState, prom.GaugeValue, gaugeOf(s == n.State), n.Addr, role, s)
		}
	}
}
