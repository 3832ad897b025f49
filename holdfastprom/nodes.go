package holdfastprom

import (
	"github.com/holdfast-dev/holdfast/tier"
	prom "github.com/prometheus/client_golang/prometheus"
)

// Node is one Redis node's health as the shared tier reports it (package
// redis, Tier.NodeStats); the caller converts, so the exporter works with
// any tier that has nodes.
type Node = tier.Node

// NodeStates are the values of the state label of holdfast_redis_node_state.
var NodeStates = []string{"ready", "not_ready", "ejected"}

// NodeCollector reports per-node metrics from a snapshot function called at
// each scrape. Node addresses are label values: a cluster has tens of
// nodes, not an unbounded number.
type NodeCollector struct {
	nodes                                       func() []Node
	requests, failures, timeouts, reads, ejects *prom.Desc
	share, state                                *prom.Desc
}

var _ prom.Collector = (*NodeCollector)(nil)

// NewNodeCollector returns a NodeCollector over nodes.
func NewNodeCollector(nodes func() []Node) *NodeCollector {
	d := func(name, help string, labels ...string) *prom.Desc {
		return prom.NewDesc("holdfast_redis_node_"+name, help, append([]string{"addr", "role"}, labels...), nil)
	}
	return &NodeCollector{
		nodes:    nodes,
		requests: d("requests_total", "Commands sent to the node."),
		failures: d("failures_total", "Commands to the node that failed, timeouts included."),
		timeouts: d("timeouts_total", "Commands to the node past their budget."),
		reads:    d("reads_total", "Keys the node answered."),
		ejects:   d("ejections_total", "Times the node was ejected."),
		share:    d("read_share", "The node's share of the reads of all nodes."),
		state:    d("state", "1 for the node's current state: ready, not_ready (a replica not in sync) or ejected.", "state"),
	}
}

// Describe implements prometheus.Collector.
func (c *NodeCollector) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{c.requests, c.failures, c.timeouts, c.reads, c.ejects, c.share, c.state} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *NodeCollector) Collect(ch chan<- prom.Metric) {
	for _, n := range c.nodes() {
		role := "replica"
		if n.Primary {
			role = "primary"
		}
		for _, m := range []struct {
			d *prom.Desc
			v uint64
		}{{c.requests, n.Requests}, {c.failures, n.Failures}, {c.timeouts, n.Timeouts}, {c.reads, n.Reads}, {c.ejects, n.Ejections}} {
			ch <- prom.MustNewConstMetric(m.d, prom.CounterValue, float64(m.v), n.Addr, role)
		}
		ch <- prom.MustNewConstMetric(c.share, prom.GaugeValue, n.ReadShare, n.Addr, role)
		for _, s := range NodeStates {
			v := 0.0
			if s == n.State {
				v = 1
			}
			ch <- prom.MustNewConstMetric(c.state, prom.GaugeValue, v, n.Addr, role, s)
		}
	}
}
