package redis

import (
	"slices"
	"sort"
	"strconv"
	"time"
)

// NodeState is a Cluster node's state as the read path sees it.
type NodeState int32

// The node states.
const (
	// NodeReady: the node takes reads. (A replica of a shard not read
	// for longer than its readiness bound takes them again after the
	// round that the shard's next read asks for.)
	NodeReady NodeState = iota
	// NodeNotReady: a replica that is syncing, loading, lagging, whose
	// link to its primary is down, or that has not been polled since its
	// connection was (re)opened; or a primary that is loading.
	NodeNotReady
	// NodeEjected: taken out after failures, waiting for a probe.
	NodeEjected
)

func (s NodeState) String() string {
	switch s {
	case NodeReady:
		return "ready"
	case NodeNotReady:
		return "not ready"
	case NodeEjected:
		return "ejected"
	}
	return "NodeState(" + strconv.Itoa(int(s)) + ")"
}

// NodeStats is a snapshot of one Cluster node's counters since it joined
// the tier's map.
type NodeStats struct {
	Addr    string
	Primary bool   // serves its slots as primary (in the tier's slot map)
	Of      string // for a replica, its primary's address
	State   NodeState
	Reason  string // why it is not ready, when it is not

	Requests uint64 // commands sent (GET, MGET, and writes routed to it)
	Failures uint64 // commands that failed, timeouts included
	Timeouts uint64 // commands past their budget
	Reads    uint64 // keys this node answered (hits and misses)
	// ReadShare is Reads over the Reads of all nodes in the snapshot.
	ReadShare float64

	Ejections      uint64 // times ejected
	Probes         uint64 // probe PINGs sent while ejected
	ProbeFailures  uint64
	Readies        uint64 // times it became ready
	WatchdogCloses uint64 // silent connections closed
	Polls          uint64 // readiness polls answered
	PollFailures   uint64
	LastEjected    time.Time // Clock time of the last ejection; zero if never
}

// state is n's state for NodeStats.
func (n *node) state() NodeState {
	switch {
	case n.ejected.Load():
		return NodeEjected
	case n.ready.Load():
		return NodeReady
	}
	return NodeNotReady
}

// NodeStats returns a snapshot of every Cluster node's counters and state,
// sorted by address; nil for a standalone server or with per-node health
// Disabled. Nodes that left the slot map lately are included, not ready.
//
// Replicas are polled only while their shard is read (readiness.go); a
// call asks for the rounds, as a read does, so that a replica of a shard
// not read for a while is polled and reported afresh within a tick of
// the node set's loop (50 ms).
func (t *Tier) NodeStats() []NodeStats { return t.nodeStats(true) }

// nodeStats is NodeStats; ask says whether to ask for the rounds. Health
// does not: the Cache asks for it four times a second, whether anything
// is read or not.
func (t *Tier) nodeStats(ask bool) []NodeStats {
	set := t.nodes
	if set == nil {
		set = t.reps.Load()
	}
	if set == nil {
		return nil
	}
	tp := set.topo.Load()
	for _, sh := range tp.shards {
		if ask {
			sh.nodes[0].wanted.Store(true)
		}
	}
	nodes := slices.Clone(tp.nodes)
	set.mu.Lock()
	for _, rn := range set.retired {
		nodes = append(nodes, rn.n)
	}
	set.mu.Unlock()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].addr < nodes[j].addr })
	out := make([]NodeStats, 0, len(nodes))
	var total uint64
	for _, n := range nodes {
		inMap := tp.shardOf(n) != nil
		st := NodeStats{
			Addr:           n.addr,
			Primary:        n.primary.Load(),
			State:          n.state(),
			Requests:       n.requests.load(),
			Failures:       n.failures.load(),
			Timeouts:       n.timeouts.load(),
			Reads:          n.reads.load(),
			Probes:         n.probes.Load(),
			ProbeFailures:  n.probeErrs.Load(),
			WatchdogCloses: n.closes.Load(),
			Polls:          n.polls.Load(),
			PollFailures:   n.pollErrs.Load(),
		}
		if !st.Primary && inMap {
			st.Of = tp.shardOf(n).nodes[0].addr
		}
		if !inMap {
			st.Primary = false
			st.State = NodeNotReady
		}
		n.mu.Lock()
		st.Ejections = n.ej.ejections
		st.Readies = n.readies
		st.LastEjected = n.lastEjected
		if st.State == NodeNotReady {
			st.Reason = n.reason
			if !inMap {
				st.Reason = "not in the slot map"
			}
		}
		n.mu.Unlock()
		total += st.Reads
		out = append(out, st)
	}
	if total > 0 {
		for i := range out {
			out[i].ReadShare = float64(out[i].Reads) / float64(total)
		}
	}
	return out
}
