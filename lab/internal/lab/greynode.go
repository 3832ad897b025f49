package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

// greyNode: one primary of the 3 + 3 Cluster goes grey, slow and lossy but
// alive, then is cut off, under node-freeze's load (300 req/s over 3,000
// warmed keys, hot tier off). Error-based ejection misses a grey node: it
// answers, only late. The run is 40 s: 5 s healthy, 20 s of 30 ms ± 10 ms
// delay each way and 2% loss, 10 s of partition (every packet to or from
// the node dropped, its cluster bus too, as a real partition cuts it: the
// Cluster fails the node over after cluster-node-timeout, 2 s, as it would
// in production), 5 s healed.
//
// Cutting the node's ports is not a partition: the node's own connections
// to its peers' cluster buses go out from ephemeral ports, and a peer that
// still hears the node's pings on them keeps it alive (the Cluster never
// fails it over). So the grey node (the first started, a primary) makes
// its outgoing connections from an address of its own, 127.0.0.2
// (bind-source-addr; it announces 127.0.0.1 all the same), and the
// partition drops that address too.
//
// It runs only in a network namespace of the lab's own (see InOwnNetwork):
// the lab command re-executes itself under unshare -n for it. The delay is
// a proxy's the node announces as its address (cluster-announce-port), so
// clients and the node's replica reach it through the proxy; loss and the
// partition are tc's on lo (see Shaping). The cluster bus does not go
// through the proxy and is not shaped in the grey phase: the Cluster keeps
// the node (a grey node is one its peers still vouch for).
func greyNode(o Options) Plan {
	d := o.length(greyDuration)
	ph := greyPhasesFor(d)
	keys := max(300, int(clusterKeys*min(1, float64(d)/float64(greyDuration))))
	w := [2]time.Duration{ph.grey, ph.heal}
	p := clusterParams(d, w, keys)
	p["fault"] = fmt.Sprintf("one primary (the first node started) grey from %gs: %v ± %v delay each way, %g%% loss; partitioned (100%% loss, cluster bus too) from %gs; healed at %gs",
		ph.grey.Seconds(), greyDelay, greyJitter, greyLoss*100, ph.partition.Seconds(), ph.heal.Seconds())
	p["grey_start_s"], p["partition_start_s"], p["heal_s"] = ph.grey.Seconds(), ph.partition.Seconds(), ph.heal.Seconds()
	p["delay"] = "a forwarding proxy the node announces as its address (cluster-announce-port): every chunk held 30 ms ± 10 ms (uniform) each way, order kept; the kernel here has no netem"
	p["loss"] = "tc in the lab's own network namespace: htb + u32 on the node's port (source or destination) to a class that holds nothing (pfifo limit 0); every packet whose IP ID's low byte is one of 5 values in 1..255 (5/256 = 2.0%), a deterministic every-51st packet of each connection, not a random draw"
	p["partition"] = "the same class for every packet to or from the node's port, its proxy's port, its cluster bus port and its outgoing connections' source address (127.0.0.2: bind-source-addr, so that its own connections to its peers' buses are cut too)"
	p["phases"] = "grey_* and partition_* figures are of requests scheduled in each phase, all keys; grey_node_keys_* and partition_node_keys_* of the grey node's keys only"
	p["ejection"] = "holdfast only: ejection_ms from the grey phase's start to the tier's first ejection of the node (absent: none), partition_ejection_ms from the partition's start to the first ejection after it (absent: none, as when the node was already out then: grey_node_out_at_partition 1); grey_node_ejections_before/_grey/_partition count them per phase"
	p["failover_ms"] = "from the partition's start until the node's replica reports role master"
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		if !InOwnNetwork() {
			return ModeResult{}, &MissingError{Part: "a network namespace of the lab's own (the lab command re-executes itself under unshare -n for grey-node; it needs unshare, ip and tc, and root)"}
		}
		r := &greyRun{stored: storedKey(m), ph: ph, ejection: -1, partitionEjection: -1, failover: -1,
			all:  [2]*Recorder{NewRecorder(ph.grey, ph.partition), NewRecorder(ph.partition, ph.heal)},
			grey: [2]*Recorder{NewRecorder(ph.grey, ph.partition), NewRecorder(ph.partition, ph.heal)}}
		defer r.close()
		t := clusterTraffic(d, keys)
		t.Window = w
		t.NodeArgs = func(i int) []string {
			if i != greyNodeIndex {
				return nil
			}
			return []string{"--bind-source-addr", greySourceAddr, "--cluster-announce-ip", "127.0.0.1"}
		}
		t.Prepare = r.prepare
		t.Setup = func(f *Fixture) error { return r.setup(f, keys) }
		t.Observe = r.observe
		t.Faults = []Fault{
			{At: ph.grey, Name: "grey", Do: r.goGrey},
			{At: ph.partition, Name: "partition", Do: r.partition},
			{At: ph.heal, Name: "heal", Do: r.healNode},
		}
		t.Extra = r.extra
		return t.RunMode(ctx, o, m)
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: run,
		Marks:  []Mark{{At: ph.grey, Label: "grey"}, {At: ph.partition, Label: "partition"}, {At: ph.heal, Label: "heal"}},
		Figure: "holdfast window p99 ≤ 10 ms with 0 errors in both phases (grey_*, partition_*), naive beside; ejection_ms, failover_ms"}
}

const (
	// greyNodeIndex is the grey node among the Cluster's (one of the first
	// three, the primaries), greySourceAddr its outgoing connections'
	// source address.
	greyNodeIndex  = 0
	greySourceAddr = "127.0.0.2"

	greyDuration = 40 * time.Second

	greyDelay  = 30 * time.Millisecond
	greyJitter = 10 * time.Millisecond
	greyLoss   = 0.02
)

// greyPhases are the offsets at which the node goes grey, is partitioned
// and is healed: an eighth, five eighths and seven eighths of the run (5,
// 25 and 35 s of 40).
type greyPhases struct{ grey, partition, heal time.Duration }

func greyPhasesFor(d time.Duration) greyPhases {
	at := func(n int64) time.Duration { return (d * time.Duration(n) / 8).Round(time.Millisecond) }
	return greyPhases{grey: at(1), partition: at(5), heal: at(7)}
}

// greyRun is one mode's run of grey-node.
type greyRun struct {
	stored func(string) string
	ph     greyPhases

	node      *redistest.Process
	nodePort  int
	replica   string // the node's replica, which the Cluster promotes
	proxy     *greyProxy
	isGreyKey func(key string) bool

	all, grey [2]*Recorder // per phase: every key, the grey node's keys

	// Set on the fault goroutine, read by extra after it ended.
	ejections0        uint64        // the tier's ejections of the node after the warm-up
	ejectionsAtGrey   uint64        // ... at the grey phase's start
	ejectionsAtPart   uint64        // ... at the partition's
	ejectionsAtHeal   uint64        // ... at the heal
	ejection          time.Duration // from the grey phase's start; -1: none in it
	partitionEjection time.Duration // from the partition's start; -1: none in it
	failover          time.Duration // -1: none
	outAtPartition    bool          // the tier had the node out as the partition began
	shaped            bool
}

// prepare runs before the readers exist: it puts the proxy in front of the
// node and has the node announce it, so that every client and the replica
// reach the node through it.
func (r *greyRun) prepare(f *Fixture) error {
	owner, err := slotOwners(f.Cluster.Nodes[0].Addr())
	if err != nil {
		return err
	}
	r.node = f.Cluster.Nodes[greyNodeIndex]
	addr := r.node.Addr()
	if role, err := Role(addr); err != nil || role != "primary" {
		return fmt.Errorf("grey node %s: role %q, %v; want primary", addr, role, err)
	}
	_, port, _ := strings.Cut(addr, ":")
	r.nodePort, _ = strconv.Atoi(port)
	r.isGreyKey = func(key string) bool { return owner[redis.Slot(r.stored(key))] == addr }
	for _, n := range f.Cluster.Nodes {
		if n == r.node {
			continue
		}
		if p, err := InfoField(n.Addr(), "replication", "master_port"); err == nil && p == port {
			r.replica = n.Addr()
		}
	}
	if r.replica == "" {
		return fmt.Errorf("no replica of %s", addr)
	}
	if r.proxy, err = startGreyProxy(addr); err != nil {
		return err
	}
	_, pport, _ := strings.Cut(r.proxy.Addr(), ":")
	for _, kv := range [][2]string{{"cluster-announce-bus-port", strconv.Itoa(r.nodePort + 10000)}, {"cluster-announce-port", pport}} {
		if _, err := Command(addr, time.Second, "CONFIG", "SET", kv[0], kv[1]); err != nil {
			return fmt.Errorf("%s: CONFIG SET %s: %w", addr, kv[0], err)
		}
	}
	return waitAnnounced(f.Cluster, r.proxy.Addr(), 15*time.Second)
}

// waitAnnounced waits until every node's CLUSTER SLOTS lists addr's port.
func waitAnnounced(c *Cluster, addr string, limit time.Duration) error {
	_, port, _ := strings.Cut(addr, ":")
	deadline := time.Now().Add(limit)
	for {
		seen := 0
		for _, n := range c.Nodes {
			s, err := Command(n.Addr(), time.Second, "CLUSTER", "SLOTS")
			if err == nil && strings.Contains("\n"+s+"\n", "\n"+port+"\n") {
				seen++
			}
		}
		if seen == len(c.Nodes) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s announced to %d of %d nodes within %v", addr, seen, len(c.Nodes), limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *greyRun) setup(f *Fixture, keys int) error {
	if err := warm(f, productKeys(keys), baseLoader); err != nil {
		return err
	}
	waitNodesReady(f, 15*time.Second)
	time.Sleep(redis.DefaultPrimaryAfterWrite + 100*time.Millisecond)
	if s, ok := nodeStat(f.Reader, r.proxy.Addr()); ok {
		r.ejections0 = s.Ejections
	}
	return nil
}

func (r *greyRun) observe(f *Fixture, req Request, _ any, _ []byte, err error) {
	lat := time.Since(f.Start.Add(req.At))
	o := OK
	if err != nil {
		o = Failed
	}
	for i := range r.all {
		r.all[i].Record(req.At, lat, o)
		if r.isGreyKey(req.Key) {
			r.grey[i].Record(req.At, lat, o)
		}
	}
}

// goGrey delays and loses the node's traffic, then watches the tier's
// figures for its ejection until the partition.
func (r *greyRun) goGrey(ctx context.Context, f *Fixture) error {
	r.proxy.SetDelay(greyDelay, greyJitter)
	if err := shape(Shaping{Ports: []int{r.nodePort}, Loss: greyLoss}); err != nil {
		return err
	}
	r.shaped = true
	at := time.Now()
	s0, counted := nodeStat(f.Reader, r.proxy.Addr())
	if !counted {
		return nil
	}
	r.ejectionsAtGrey = s0.Ejections
	if s, ok := watchNode(ctx, f, r.proxy.Addr(), f.Start.Add(r.ph.partition), func(s redis.NodeStats) bool { return s.Ejections > r.ejectionsAtGrey }); ok {
		r.ejection = s.LastEjected.Sub(at)
	}
	return nil
}

// partition drops every packet of the node, its proxy and its bus, then
// watches for the tier's ejection and the Cluster's failover until heal.
func (r *greyRun) partition(ctx context.Context, f *Fixture) error {
	busPort := r.nodePort + 10000
	_, pport, _ := strings.Cut(r.proxy.Addr(), ":")
	proxyPort, _ := strconv.Atoi(pport)
	if err := shape(Shaping{Ports: []int{r.nodePort, proxyPort, busPort}, Addrs: []string{greySourceAddr}, Partition: true}); err != nil {
		return err
	}
	at := time.Now()
	s0, counted := nodeStat(f.Reader, r.proxy.Addr())
	r.ejectionsAtPart = s0.Ejections
	r.outAtPartition = counted && s0.State != redis.NodeReady
	end := f.Start.Add(r.ph.heal)
	lastRole := time.Time{}
	for time.Now().Before(end) {
		if s, ok := nodeStat(f.Reader, r.proxy.Addr()); counted && ok && r.partitionEjection < 0 && s.Ejections > r.ejectionsAtPart {
			r.partitionEjection = s.LastEjected.Sub(at)
		}
		if r.failover < 0 && time.Since(lastRole) >= 50*time.Millisecond {
			lastRole = time.Now()
			if role, err := Role(r.replica); err == nil && role == "primary" {
				r.failover = time.Since(at)
			}
		}
		if r.failover >= 0 && (!counted || r.partitionEjection >= 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func (r *greyRun) healNode(_ context.Context, f *Fixture) error {
	if s, ok := nodeStat(f.Reader, r.proxy.Addr()); ok {
		r.ejectionsAtHeal = s.Ejections
	}
	r.proxy.SetDelay(0, 0)
	r.shaped = false
	return unshape()
}

// close undoes what a run cut short left: the shaping and the proxy.
func (r *greyRun) close() {
	if r.shaped {
		_ = unshape()
	}
	if r.proxy != nil {
		r.proxy.Close()
	}
}

func (r *greyRun) extra(f *Fixture, res *ModeResult) {
	for i, name := range []string{"grey", "partition"} {
		addPhase(res.Extra, name, r.all[i].Window())
		addPhase(res.Extra, name+"_node_keys", r.grey[i].Window())
	}
	if r.failover >= 0 {
		res.Extra["failover_ms"] = ms(r.failover)
	}
	if s, ok := nodeStat(f.Reader, r.proxy.Addr()); ok {
		// Left out when the node was not ejected in that phase.
		if r.ejection >= 0 {
			res.Extra["ejection_ms"] = ms(r.ejection)
		}
		if r.partitionEjection >= 0 {
			res.Extra["partition_ejection_ms"] = ms(r.partitionEjection)
		}
		res.Extra["grey_node_ejections"] = float64(s.Ejections - r.ejections0)
		res.Extra["grey_node_ejections_before"] = float64(r.ejectionsAtGrey - r.ejections0)
		res.Extra["grey_node_ejections_grey"] = float64(r.ejectionsAtPart - r.ejectionsAtGrey)
		res.Extra["grey_node_ejections_partition"] = float64(r.ejectionsAtHeal - r.ejectionsAtPart)
		// 1 when the node was already out as the partition began: then it
		// may not be ejected again in it (no partition_ejection_ms).
		res.Extra["grey_node_out_at_partition"] = 0
		if r.outAtPartition {
			res.Extra["grey_node_out_at_partition"] = 1
		}
		res.Extra["grey_node_watchdog_closes"] = float64(s.WatchdogCloses)
	}
}

// addPhase puts one phase's figures into extra as PREFIX_p50_ms and so on;
// errors are failed and rejected requests, as the caller of a cache sees
// both.
func addPhase(extra map[string]float64, prefix string, s Stats) {
	extra[prefix+"_requests"] = float64(s.Requests)
	extra[prefix+"_errors"] = float64(s.Errors + s.Rejected)
	extra[prefix+"_p50_ms"] = s.P50
	extra[prefix+"_p95_ms"] = s.P95
	extra[prefix+"_p99_ms"] = s.P99
	extra[prefix+"_max_ms"] = s.Max
}
