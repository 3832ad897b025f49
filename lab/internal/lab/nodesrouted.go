package lab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/redis"
)

// nodesRouted is a Redis Cluster client that routes as Lettuce, the Redis
// client Spring uses by default, does with its default options and reads
// spread over replicas (ReadFrom ANY): the topology is read from CLUSTER
// NODES when the client starts and not again (Lettuce refreshes it only when
// periodic or adaptive refresh is turned on), and a read goes to a node of
// the key's slot picked at random, primary or replica. CLUSTER NODES lists a
// replica however far behind it is, unlike CLUSTER SLOTS, from which Redis 7
// leaves out a replica that has replicated nothing yet; so a replica
// restarted empty keeps its share of the reads through its whole resync and
// answers each with a miss. That is the failure replica-resync measures, and
// a client that routes by CLUSTER SLOTS (rueidis's cluster client) shows it
// only until it happens to re-read the topology, which after a kill is a
// matter of chance.
//
// Each node has a rueidis single-node client with the naive mode's options;
// its connections send READONLY first, since a Cluster replica redirects
// reads with MOVED on a connection that has not. Nothing follows MOVED: the
// topology does not change while it is used (replica-resync restarts a
// replica with its old node id and port).
type nodesRouted struct {
	nodes  []rueidis.Client // by node index
	addrs  []string         // by node index
	shards [][]int          // node indexes of each shard, its primary first
	slot   [16384]int16     // shard of each slot, -1 for a slot no primary serves
}

// dialNodesRouted reads the topology from the CLUSTER NODES of the first of
// seeds that answers and builds a client per node listed (failed nodes left
// out) with opt's settings.
func dialNodesRouted(seeds []string, opt rueidis.ClientOption) (*nodesRouted, error) {
	var r *nodesRouted
	err := errors.New("no seed address")
	for _, a := range seeds {
		if r, err = clusterNodesAt(a); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	for _, a := range r.addrs {
		o := opt
		o.InitAddress = []string{a}
		o.ForceSingleClient = true
		o.SendToReplicas, o.ReadNodeSelector = nil, nil
		o.DialCtxFn = dialReadOnly
		c, err := rueidis.NewClient(o)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		r.nodes = append(r.nodes, c)
	}
	return r, nil
}

// clusterNodesAt reads the topology from addr's CLUSTER NODES, without
// clients.
func clusterNodesAt(addr string) (*nodesRouted, error) {
	text, err := Command(addr, time.Second, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES: %w", err)
	}
	return parseClusterNodes(text)
}

// parseClusterNodes reads CLUSTER NODES' lines (id, ip:port@cport, flags,
// primary id, ..., slot ranges) into shards, without clients.
func parseClusterNodes(text string) (*nodesRouted, error) {
	r := &nodesRouted{}
	for i := range r.slot {
		r.slot[i] = -1
	}
	type node struct {
		id, addr, primary string
		isPrimary         bool
		ranges            []string
	}
	var nodes []node
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES: short line %q", line)
		}
		flags := "," + f[2] + ","
		if strings.Contains(flags, ",fail,") || strings.Contains(flags, ",noaddr,") || strings.Contains(flags, ",handshake,") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		nodes = append(nodes, node{id: f[0], addr: addr, primary: f[3], isPrimary: strings.Contains(flags, ",master,"), ranges: f[8:]})
	}
	shardOf := map[string]int{} // primary id to shard
	for i, n := range nodes {
		if !n.isPrimary || len(n.ranges) == 0 {
			continue
		}
		shardOf[n.id] = len(r.shards)
		r.shards = append(r.shards, []int{i})
		for _, rg := range n.ranges {
			if strings.HasPrefix(rg, "[") {
				continue // a slot migrating or importing
			}
			lo, hi, ok := strings.Cut(rg, "-")
			if !ok {
				hi = lo
			}
			first, err1 := strconv.Atoi(lo)
			last, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || first < 0 || last >= len(r.slot) || first > last {
				return nil, fmt.Errorf("CLUSTER NODES: bad slot range %q", rg)
			}
			for s := first; s <= last; s++ {
				r.slot[s] = int16(shardOf[n.id])
			}
		}
	}
	for i, n := range nodes {
		if s, ok := shardOf[n.primary]; ok && !n.isPrimary {
			r.shards[s] = append(r.shards[s], i)
		}
	}
	if len(r.shards) == 0 {
		return nil, errors.New("CLUSTER NODES: no primary serves a slot")
	}
	r.addrs = make([]string, len(nodes))
	for i, n := range nodes {
		r.addrs[i] = n.addr
	}
	return r, nil
}

// read is the client of a node of key's shard picked at random, nil when no
// primary serves key's slot.
func (r *nodesRouted) read(key string) rueidis.Client {
	s := r.slot[redis.Slot(key)]
	if s < 0 {
		return nil
	}
	sh := r.shards[s]
	return r.nodes[sh[rand.IntN(len(sh))]]
}

// write is the client of key's primary, nil when no primary serves its slot.
func (r *nodesRouted) write(key string) rueidis.Client {
	s := r.slot[redis.Slot(key)]
	if s < 0 {
		return nil
	}
	return r.nodes[r.shards[s][0]]
}

// Close closes every node's client.
func (r *nodesRouted) Close() {
	for _, c := range r.nodes {
		c.Close()
	}
}

// errNoSlotOwner is a read or write of a key whose slot no primary served
// when the topology was read.
var errNoSlotOwner = errors.New("naive: no node serves the key's slot")

// dialReadOnly dials dst and sends READONLY on the new connection before
// rueidis has it, so that a Cluster replica answers its reads (a primary
// accepts READONLY and ignores it).
func dialReadOnly(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.Timeout)
	if d.Timeout <= 0 {
		deadline = time.Now().Add(time.Second)
	}
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte("*1\r\n$8\r\nREADONLY\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	// One byte at a time to the end of the line, so that nothing rueidis
	// should read is consumed here (nothing more is sent before it).
	var line []byte
	b := make([]byte, 1)
	for len(line) < 256 {
		if _, err := c.Read(b); err != nil {
			c.Close()
			return nil, fmt.Errorf("READONLY: %w", err)
		}
		line = append(line, b[0])
		if b[0] == '\n' {
			break
		}
	}
	if reply := strings.TrimSpace(string(line)); reply != "+OK" {
		c.Close()
		return nil, fmt.Errorf("READONLY: %q", reply)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
