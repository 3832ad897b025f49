package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Topology changes of a running Cluster, done with the server's own tooling
// (redis-cli --cluster add-node, reshard, del-node) so that a client sees
// what it sees in production: MOVED and ASK during a migration, a node that
// joins and leaves. Failovers are in slots.go (Failover).
//
// These methods change the cluster's node list: call them from the test's
// goroutine, not concurrently with each other or with Nodes, Addrs,
// Primaries, Replicas or WaitHealthy (RedisCluster has no lock, and AddPrimary
// may call t.Fatal when the new server cannot start).

// NodeID returns the server's Cluster node ID (CLUSTER MYID).
func (s *Process) NodeID(ctx context.Context) (string, error) {
	id, err := s.CLI(ctx, "CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	if len(id) != 40 {
		return "", fmt.Errorf("redistest: %s: CLUSTER MYID = %q", s.Addr(), id)
	}
	return id, nil
}

// Start starts a killed server again on its port, keeping the files its
// directory holds: after a SAVE, the server comes back with that snapshot,
// as a node restarted from its last RDB would (the servers have no
// persistence of their own; Restart, by contrast, deletes the data files).
// For a replica that is a copy that may lag its primary until it has
// resynced. It returns when the process answers PING.
func (s *Process) Start() error {
	s.mu.Lock()
	running := s.cmd != nil && s.exited != nil
	if running {
		select {
		case <-s.exited:
			running = false
		default:
		}
	}
	s.mu.Unlock()
	if running {
		return fmt.Errorf("redistest: Start %s: the server is running", s.Addr())
	}
	return s.startAgain("start again")
}

// Start is Process.Start, failing the test on an error.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.Process.Start(); err != nil {
		s.t.Fatal(err)
	}
}

// clusterCLI runs redis-cli --cluster with args and returns its output;
// a non-zero exit is an error carrying the output (redis-cli prints its
// reasons, "[ERR] ...", on stdout).
//
// redis-cli checks the cluster before it changes anything and refuses while
// the nodes' views of the configuration differ, as they do for a moment
// after a failover while the new epoch spreads over the bus (the slot map
// WaitStable compares can agree sooner). Such a refusal changed nothing, so
// the command is run again, every 200 ms, for up to 15 s.
func (c *RedisCluster) clusterCLI(ctx context.Context, args ...string) (string, error) {
	full := append(c.access.cliArgs(), "--cluster")
	full = append(full, args...)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, "redis-cli", full...).CombinedOutput()
		if err == nil {
			return string(out), nil
		}
		if strings.Contains(string(out), "Nodes don't agree about configuration") && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
				continue
			}
		}
		return string(out), fmt.Errorf("redis-cli --cluster %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// SlotCounts returns how many slots each primary serves, by address, as the
// first answering node sees it (CLUSTER NODES). Primaries with no slots are
// included with 0.
func (c *RedisCluster) SlotCounts(ctx context.Context) (map[string]int, error) {
	var lastErr error
	for _, n := range c.nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		out, err := n.CLI(cctx, "CLUSTER", "NODES")
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		counts := map[string]int{}
		for _, ln := range parseNodes(out) {
			if ln.primary && !ln.failed {
				counts[ln.addr] = ln.slots
			}
		}
		return counts, nil
	}
	return nil, fmt.Errorf("redistest: no node answered CLUSTER NODES: %w", lastErr)
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr, master string
	primary, failed  bool
	myself           bool
	slots            int
	owned            []string // slot ranges as printed, without open-slot markers
	open             bool     // an importing or migrating slot ("[...]")
}

func parseNodes(out string) []nodeLine {
	var lines []nodeLine
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		ln := nodeLine{
			id:      f[0],
			addr:    addr,
			master:  f[3],
			primary: strings.Contains(f[2], "master"),
			failed:  strings.Contains(f[2], "fail"), // fail and fail?
			myself:  strings.Contains(f[2], "myself"),
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				ln.open = true
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 == nil && err2 == nil && b >= a {
				ln.slots += b - a + 1
				ln.owned = append(ln.owned, r)
			}
		}
		lines = append(lines, ln)
	}
	return lines
}

// WaitStable waits until the cluster has settled after a fault or a
// topology change: WaitHealthy (every node answers, cluster_state:ok, every
// replica linked and not syncing, every node known to all), and every node
// agrees on which primary serves which slots, all 16384 slots are served,
// and no slot is being imported or migrated.
func (c *RedisCluster) WaitStable(ctx context.Context) error {
	if err := c.WaitHealthy(ctx); err != nil {
		return err
	}
	var last string
	for {
		why, err := c.unstable(ctx)
		if err == nil && why == "" {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not stable: %w (last: %s)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unstable returns why the slot map is not settled, or "" when it is.
func (c *RedisCluster) unstable(ctx context.Context) (string, error) {
	var ref string
	for i, n := range c.nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		out, err := n.CLI(cctx, "CLUSTER", "NODES")
		cancel()
		if err != nil {
			return "", err
		}
		var owners []string
		total := 0
		for _, ln := range parseNodes(out) {
			if ln.open {
				return fmt.Sprintf("%s: %s has an open slot", n.Addr(), ln.addr), nil
			}
			if ln.primary && !ln.failed && ln.slots > 0 {
				owners = append(owners, ln.addr+" "+strings.Join(ln.owned, ","))
				total += ln.slots
			}
			if ln.failed {
				return fmt.Sprintf("%s sees %s as failed", n.Addr(), ln.addr), nil
			}
		}
		if total != 16384 {
			return fmt.Sprintf("%s sees %d slots served", n.Addr(), total), nil
		}
		slices.Sort(owners)
		view := strings.Join(owners, ";")
		if i == 0 {
			ref = view
		} else if view != ref {
			return fmt.Sprintf("%s disagrees with %s about the slot map", n.Addr(), c.nodes[0].Addr()), nil
		}
	}
	return "", nil
}

// Reshard moves nSlots slots from primary from to primary to with
// redis-cli --cluster reshard (MIGRATE of every key, clients see ASK and
// MOVED meanwhile), then waits until the cluster is stable. nSlots is
// capped at what from serves.
func (c *RedisCluster) Reshard(ctx context.Context, from, to *Server, nSlots int) error {
	if from == to {
		return fmt.Errorf("redistest: reshard from %s to itself", from.Addr())
	}
	fromID, err := from.NodeID(ctx)
	if err != nil {
		return err
	}
	toID, err := to.NodeID(ctx)
	if err != nil {
		return err
	}
	counts, err := c.SlotCounts(ctx)
	if err != nil {
		return err
	}
	nSlots = min(nSlots, counts[from.Addr()])
	if nSlots <= 0 {
		return fmt.Errorf("redistest: reshard: %s serves no slots", from.Addr())
	}
	if _, err := c.clusterCLI(ctx, "reshard", to.Addr(),
		"--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(nSlots), "--cluster-yes"); err != nil {
		return err
	}
	return c.WaitStable(ctx)
}

// AddPrimary starts a fresh cluster-enabled server, joins it to the cluster
// as an empty primary (redis-cli --cluster add-node), waits until every node
// knows it, and then moves nSlots slots to it from all the other primaries
// (reshard --cluster-from all). It returns the new server, which Nodes and
// Addrs now include, once the cluster is stable. Call it from the test's
// goroutine: it calls t.Fatal if the server cannot start.
func (c *RedisCluster) AddPrimary(ctx context.Context, nSlots int) (*Server, error) {
	if len(c.nodes) == 0 {
		return nil, errors.New("redistest: AddPrimary on an empty cluster")
	}
	first := c.nodes[0]
	first.t.Helper()
	s := newServer(first.t, &clusterNode{nodeTimeout: first.cluster.nodeTimeout}, c.access)
	entry := c.answering(ctx)
	if entry == nil {
		return s, errors.New("redistest: AddPrimary: no node answers")
	}
	if _, err := c.clusterCLI(ctx, "add-node", s.Addr(), entry.Addr()); err != nil {
		// Not a node of the cluster: stopped now rather than at the
		// test's end, so that a test counting goroutines after its
		// clients closed does not find this server's.
		s.stop()
		return s, err
	}
	c.nodes = append(c.nodes, s)
	if err := c.WaitStable(ctx); err != nil {
		return s, err
	}
	if nSlots <= 0 {
		return s, nil
	}
	id, err := s.NodeID(ctx)
	if err != nil {
		return s, err
	}
	if _, err := c.clusterCLI(ctx, "reshard", s.Addr(),
		"--cluster-from", "all", "--cluster-to", id,
		"--cluster-slots", strconv.Itoa(nSlots), "--cluster-yes"); err != nil {
		return s, err
	}
	return s, c.WaitStable(ctx)
}

// RemovePrimary moves every slot of primary s to primary to, removes s from
// the cluster (redis-cli --cluster del-node: every other node forgets it)
// and stops its process. Nodes and Addrs no longer include it afterwards.
// It returns once the remaining cluster is stable.
func (c *RedisCluster) RemovePrimary(ctx context.Context, s, to *Server) error {
	idx := slices.Index(c.nodes, s)
	if idx < 0 {
		return fmt.Errorf("redistest: RemovePrimary: %s is not a node of this cluster", s.Addr())
	}
	counts, err := c.SlotCounts(ctx)
	if err != nil {
		return err
	}
	if n := counts[s.Addr()]; n > 0 {
		if err := c.Reshard(ctx, s, to, n); err != nil {
			return err
		}
	}
	id, err := s.NodeID(ctx)
	if err != nil {
		return err
	}
	if _, err := c.clusterCLI(ctx, "del-node", to.Addr(), id); err != nil {
		return err
	}
	// del-node shuts the node down; kill makes sure, and reaps it.
	s.kill()
	c.nodes = slices.Delete(c.nodes, idx, idx+1)
	return c.WaitStable(ctx)
}

// answering returns the first node that answers PING, or nil.
func (c *RedisCluster) answering(ctx context.Context) *Server {
	for _, n := range c.nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		out, err := n.CLI(cctx, "PING")
		cancel()
		if err == nil && out == "PONG" {
			return n
		}
	}
	return nil
}
