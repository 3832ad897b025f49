package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// StartFleet starts a Cluster of shards primaries with one replica each, too
// many nodes for redis-cli --cluster create to join in seconds (it meets
// them one by one and checks the configuration after each step). Nodes are
// started in parallel and joined by hand: each primary takes its slots with
// one CLUSTER ADDSLOTSRANGE and a configuration epoch of its own (so no
// epoch collision has to be resolved), the first node meets every other,
// gossip spreads the rest, and each replica is told its primary once it
// knows every node. Nodes[i] is shard i's primary and Nodes[shards+i] its
// replica, until a failover changes the roles. Every node started is
// stopped again when StartFleet fails.
//
// A Cluster that does not form is stopped and started once more from new
// processes, the first failure written to stderr: the lab measures what
// clients see once a Cluster runs, and in busy clean-clone test runs one
// node in a few hundred fleet starts stayed unknown to a peer for the
// whole minute, however often the two were told to meet.
func StartFleet(ctx context.Context, shards int, nodeTimeout time.Duration) (*Cluster, error) {
	c, err := startFleetOnce(ctx, shards, nodeTimeout)
	if err == nil || ctx.Err() != nil {
		return c, err
	}
	fmt.Fprintf(os.Stderr, "lab: a %d-node Cluster did not form, starting it again: %v\n", 2*shards, err)
	return startFleetOnce(ctx, shards, nodeTimeout)
}

func startFleetOnce(ctx context.Context, shards int, nodeTimeout time.Duration) (_ *Cluster, err error) {
	c := &Cluster{Nodes: make([]*redistest.Process, 2*shards)}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	buses, err := c.launchAll(nodeTimeout)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		id, err := Command(n.Addr(), time.Second, "CLUSTER", "MYID")
		if err != nil {
			return nil, fmt.Errorf("%s: CLUSTER MYID: %w", n.Addr(), err)
		}
		ids[i] = id
		// Distinct epochs only spare the nodes resolving collisions one
		// by one; a node that already has one (seen once in the lab's
		// tests, with other Clusters starting beside) keeps it, and
		// Redis's collision handling makes it unique.
		if _, err := Command(n.Addr(), time.Second, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil &&
			!strings.Contains(err.Error(), "already non-zero") {
			return nil, fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", n.Addr(), err)
		}
	}
	for i, r := range slotRanges(shards) {
		if _, err := Command(c.Nodes[i].Addr(), time.Second, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER ADDSLOTSRANGE: %w", c.Nodes[i].Addr(), err)
		}
	}
	// Every pair meets directly, rather than all meeting node 0 and the
	// rest left to gossip: gossip tells each ping about a tenth of the
	// nodes, and on a busy machine 60 nodes then took more than 30 s to
	// know each other. 1,770 MEETs take well under a second.
	if err := c.meetAll(buses); err != nil {
		return nil, err
	}
	if err := c.waitKnown(ctx, buses, 60*time.Second); err != nil {
		return nil, err
	}
	for i := range shards {
		r := c.Nodes[shards+i]
		if _, err := Command(r.Addr(), 5*time.Second, "CLUSTER", "REPLICATE", ids[i]); err != nil {
			return nil, fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", r.Addr(), ids[i], err)
		}
	}
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// launchAll starts every node, 8 at a time (each start execs redis-cli to
// wait for PING, and 60 at once would starve the machine's 2 cores), and
// returns their cluster bus ports.
func (c *Cluster) launchAll(nodeTimeout time.Duration) ([]int, error) {
	sem := make(chan struct{}, 8)
	errs := make([]error, len(c.Nodes))
	buses := make([]int, len(c.Nodes))
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c.Nodes[i], buses[i], errs[i] = launchFleetNode(nodeTimeout)
		}()
	}
	wg.Wait()
	// Close (on StartFleet's error path) skips the nodes that did not start.
	kept := c.Nodes[:0]
	for _, n := range c.Nodes {
		if n != nil {
			kept = append(kept, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.Nodes = kept
		return nil, err
	}
	return buses, nil
}

// launchFleetNode starts one cluster-enabled server with a bus port of its
// own, picked free, rather than Redis's port + 10,000 (above 65,535 for a
// quarter of the kernel's ephemeral ports, and not checked free). A bus port
// taken between the pick and the bind fails the start: picked again, up to 3
// times.
func launchFleetNode(nodeTimeout time.Duration) (*redistest.Process, int, error) {
	var last error
	for range 3 {
		bus, err := freeLoopbackPort()
		if err != nil {
			return nil, 0, err
		}
		p, err := redistest.Launch(redistest.Options{Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			// Serve the covered slots while a failed primary's are not yet
			// taken over, and let a replica whose primary went silent be
			// promoted however long ago it last heard from it.
			"--cluster-require-full-coverage", "no",
			"--cluster-replica-validity-factor", "0",
			// A full resync straight over the socket, without waiting 5 s
			// for more replicas to join it.
			"--repl-diskless-sync", "yes",
			"--repl-diskless-sync-delay", "0",
		}})
		if err == nil {
			return p, bus, nil
		}
		last = err
	}
	return nil, 0, last
}

func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// slotRanges splits the 16,384 hash slots into n contiguous ranges, first
// and last slot inclusive, the first ones a slot longer when n does not
// divide 16,384.
func slotRanges(n int) [][2]int {
	out := make([][2]int, n)
	lo := 0
	for i := range n {
		size := 16384 / n
		if i < 16384%n {
			size++
		}
		out[i] = [2]int{lo, lo + size - 1}
		lo += size
	}
	return out
}

// meetFrom has the node at addr meet every other node, and every other node
// meet it: a handshake the busy machine let time out on one side may
// complete from the other. Errors are left to waitKnown's next look.
func (c *Cluster) meetFrom(addr string, buses []int) {
	host, port, _ := net.SplitHostPort(addr)
	bus := ""
	for j, m := range c.Nodes {
		if m.Addr() == addr {
			bus = strconv.Itoa(buses[j])
		}
	}
	for j, m := range c.Nodes {
		if m.Addr() == addr {
			continue
		}
		mhost, mport, _ := net.SplitHostPort(m.Addr())
		_, _ = Command(addr, time.Second, "CLUSTER", "MEET", mhost, mport, strconv.Itoa(buses[j]))
		if bus != "" {
			_, _ = Command(m.Addr(), time.Second, "CLUSTER", "MEET", host, port, bus)
		}
	}
}

// meetAll has every node meet every node after it, 8 nodes at a time.
func (c *Cluster) meetAll(buses []int) error {
	errs := make([]error, len(c.Nodes))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for j := i + 1; j < len(c.Nodes); j++ {
				host, port, _ := net.SplitHostPort(c.Nodes[j].Addr())
				if _, err := Command(n.Addr(), time.Second, "CLUSTER", "MEET", host, port, strconv.Itoa(buses[j])); err != nil {
					errs[i] = fmt.Errorf("%s: CLUSTER MEET %s: %w", n.Addr(), c.Nodes[j].Addr(), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitKnown waits, at most limit, until every node knows every node and
// who serves every slot. A node still short of some every few seconds
// meets them all again: a handshake that times out on a busy machine is
// dropped, and gossip left one node a peer short for a whole minute in a
// test run beside others.
func (c *Cluster) waitKnown(ctx context.Context, buses []int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	want := strconv.Itoa(len(c.Nodes))
	remeet := time.Now().Add(3 * time.Second)
	for {
		behind, known := "", ""
		for _, node := range c.Nodes {
			if !node.Running() {
				return fmt.Errorf("%s exited while the Cluster formed: %s", node.Addr(), logTail(node, 5))
			}
		}
		for _, node := range c.Nodes {
			st, err := Command(node.Addr(), time.Second, "CLUSTER", "INFO")
			info := parseInfo(st)
			// With cluster-require-full-coverage off, cluster_state is ok
			// before a node has heard who serves every slot: a client
			// that read its CLUSTER SLOTS then would find slots with no
			// node.
			if got := info["cluster_known_nodes"]; err != nil || got != want || info["cluster_slots_assigned"] != "16384" {
				behind, known = node.Addr(), got+", slots assigned "+info["cluster_slots_assigned"]
				if err != nil {
					known = err.Error()
				}
				break
			}
		}
		if behind == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not know all %d nodes within %v (cluster_known_nodes: %s)%s", behind, len(c.Nodes), limit, known, c.missingFrom(behind))
		}
		if time.Now().After(remeet) {
			remeet = time.Now().Add(3 * time.Second)
			c.meetFrom(behind, buses)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// missingFrom says, for waitKnown's error, which nodes the node at addr
// does not list in CLUSTER NODES, how many nodes each of them knows, and
// the end of its log.
func (c *Cluster) missingFrom(addr string) string {
	nodes, err := Command(addr, time.Second, "CLUSTER", "NODES")
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, n := range c.Nodes {
		if n.Addr() == addr || strings.Contains(nodes, " "+n.Addr()+"@") {
			continue
		}
		known := "?"
		if info, err := Command(n.Addr(), time.Second, "CLUSTER", "INFO"); err != nil {
			known = err.Error()
		} else {
			known = parseInfo(info)["cluster_known_nodes"]
		}
		fmt.Fprintf(&b, "; missing %s (knows %s nodes; log: %s)", n.Addr(), known, logTail(n, 3))
	}
	return b.String()
}

// logTail is the last n lines of the node's log, on one line, without
// the warning about memory overcommit every start on this machine logs.
func logTail(p *redistest.Process, n int) string {
	b, err := os.ReadFile(filepath.Join(p.Dir(), "redis.log"))
	if err != nil {
		return err.Error()
	}
	var kept []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "overcommit") {
			kept = append(kept, l)
		}
	}
	return lastLines(strings.Join(kept, "\n"), n)
}
