package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The slot map: which nodes serve which hash slots, read with CLUSTER SLOTS
// at once after a MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply, a lost node
// connection, or a poll that finds a node in another role than the map's;
// then every TopologyInterval for settleFor, and while a node is ejected;
// otherwise every SteadyTopologyInterval, as rueidis refreshes its own map
// only on its redirects and lost connections (and an optional timer).

// topology is an immutable snapshot of the slot map.
type topology struct {
	slots  [slotCount]int16 // index in shards; -1 when no node serves the slot
	shards []shard
	nodes  []*node // every node, sorted by address
	// prev is the last map that grouped slots by primary differently, if
	// any: hot keys' copies chosen under it may still hold values, so
	// Invalidate deletes them too (smear.go).
	prev *partition
}

// partition is which slots share a primary, without the nodes.
type partition struct {
	slots  [slotCount]int16
	shards int
}

// samePartition reports whether a and b group the slots alike (shard
// indexes aside).
func samePartition(a *[slotCount]int16, na int, b *[slotCount]int16, nb int) bool {
	if na != nb {
		return false
	}
	ab, ba := make([]int16, na), make([]int16, nb)
	for i := range ab {
		ab[i], ba[i] = -1, -1
	}
	for sl := range a {
		x, y := a[sl], b[sl]
		if x < 0 || y < 0 {
			if x != y {
				return false
			}
			continue
		}
		if (ab[x] >= 0 && ab[x] != y) || (ba[y] >= 0 && ba[y] != x) {
			return false
		}
		ab[x], ba[y] = y, x
	}
	return true
}

type shard struct {
	nodes []*node // nodes[0] is the primary
}

// retiredNode is a node that left the slot map, kept for retireFor with
// its client and counters in case it comes back: CLUSTER SLOTS leaves out a
// replica the cluster flags as failed, for instance while it restarts.
type retiredNode struct {
	n  *node
	at time.Time
}

// retireFor is how long a node that left the map is kept.
const retireFor = time.Minute

// refresh reads the slot map from a node that is not ejected (trying up to
// three) and installs it.
func (s *nodeSet) refresh() error {
	if s.sentinel {
		return s.refreshSentinel()
	}
	var askers []*node
	if tp := s.topo.Load(); tp != nil {
		for _, n := range tp.nodes {
			if !n.ejected.Load() {
				askers = append(askers, n)
			}
		}
		rand.Shuffle(len(askers), func(i, j int) { askers[i], askers[j] = askers[j], askers[i] })
	}
	var lastErr error
	try := func(c rueidis.Client, fallback string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), max(pollTimeout, s.t.opts.DialTimeout))
		defer cancel()
		msg, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToMessage()
		if err == nil {
			var m slotMap
			if m, err = parseClusterSlots(msg, fallback); err == nil {
				s.install(m)
				return true
			}
		}
		lastErr = err
		return false
	}
	for i, n := range askers {
		if i == 3 {
			break
		}
		if try(n.client, hostOf(n.addr)) {
			return nil
		}
	}
	if try(s.t.client, hostOf(s.t.opts.Addrs[0])) {
		return nil
	}
	return fmt.Errorf("redis tier: CLUSTER SLOTS: %w", lastErr)
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// slotMap is a parsed CLUSTER SLOTS: slot ranges and their nodes' addresses,
// primary first.
type slotMap []slotRange

type slotRange struct {
	from, to int
	addrs    []string
}

func parseClusterSlots(msg rueidis.RedisMessage, fallbackHost string) (slotMap, error) {
	ranges, err := msg.ToArray()
	if err != nil {
		return nil, err
	}
	var m slotMap
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry: %v", err)
		}
		from, err1 := f[0].AsInt64()
		to, err2 := f[1].AsInt64()
		if err := errors.Join(err1, err2); err != nil || from < 0 || to >= slotCount || from > to {
			return nil, fmt.Errorf("CLUSTER SLOTS range %d-%d: %v", from, to, err)
		}
		sr := slotRange{from: int(from), to: int(to)}
		for _, nm := range f[2:] {
			ni, err := nm.ToArray()
			if err != nil || len(ni) < 2 {
				return nil, fmt.Errorf("CLUSTER SLOTS node: %v", err)
			}
			host, _ := ni[0].ToString()
			port, err := ni[1].AsInt64()
			if err != nil {
				return nil, fmt.Errorf("CLUSTER SLOTS port: %w", err)
			}
			if host == "" || host == "?" {
				host = fallbackHost
			}
			sr.addrs = append(sr.addrs, net.JoinHostPort(host, strconv.FormatInt(port, 10)))
		}
		m = append(m, sr)
	}
	if len(m) == 0 {
		return nil, errors.New("CLUSTER SLOTS: no slots served")
	}
	return m, nil
}

// install builds a topology from m, reusing the nodes it already knows,
// creating the new ones and closing the ones no longer listed.
func (s *nodeSet) install(m slotMap) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	var fresh []string
	for _, r := range m {
		for _, a := range r.addrs {
			if _, ok := s.nodes[a]; ok || contains(fresh, a) {
				continue
			}
			if rn, ok := s.retired[a]; ok {
				// Back in the map: same client, same counters. It has to
				// earn readiness again (unready bumps its generation).
				delete(s.retired, a)
				s.nodes[a] = rn.n
				if rn.n.ejected.Load() {
					s.ejected.Add(1)
				}
				rn.n.mu.Lock()
				rn.n.replOK = false
				rn.n.mu.Unlock()
				rn.n.unready("back in the slot map")
				continue
			}
			fresh = append(fresh, a)
		}
	}
	var expired []*node
	for a, rn := range s.retired {
		if time.Since(rn.at) > retireFor {
			expired = append(expired, rn.n)
			delete(s.retired, a)
		}
	}
	s.mu.Unlock()
	for _, n := range expired {
		s.t.closeOff(n.close) // the new map must not wait on it
	}

	// Dial new nodes outside the lock and in parallel: each may take
	// DialTimeout when its node does not answer.
	made := make([]*node, len(fresh))
	var wg sync.WaitGroup
	for i, a := range fresh {
		wg.Add(1)
		go func() {
			defer wg.Done()
			made[i] = s.newNode(a)
		}()
	}
	wg.Wait()
	created := make(map[string]*node, len(fresh))
	for _, n := range made {
		if n != nil {
			created[n.addr] = n
		}
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		for _, n := range created {
			n.close()
		}
		return
	}
	for a, n := range created {
		if _, ok := s.nodes[a]; ok {
			n.close() // a concurrent install got there first
			continue
		}
		s.nodes[a] = n
	}
	tp := &topology{}
	for i := range tp.slots {
		tp.slots[i] = -1
	}
	shardOf := map[string]int{}
	listed := map[*node]bool{}
	for _, r := range m {
		p := s.nodes[r.addrs[0]]
		if p == nil {
			continue
		}
		si, ok := shardOf[r.addrs[0]]
		if !ok {
			si = len(tp.shards)
			shardOf[r.addrs[0]] = si
			tp.shards = append(tp.shards, shard{nodes: []*node{p}})
			listed[p] = true
		}
		for _, a := range r.addrs[1:] {
			if n := s.nodes[a]; n != nil && !listed[n] {
				tp.shards[si].nodes = append(tp.shards[si].nodes, n)
				listed[n] = true
			}
		}
		for sl := r.from; sl <= r.to; sl++ {
			tp.slots[sl] = int16(si)
		}
	}
	var gone []*node
	for a, n := range s.nodes {
		if !listed[n] {
			gone = append(gone, n)
			delete(s.nodes, a)
			s.retired[a] = retiredNode{n: n, at: time.Now()}
			continue
		}
		tp.nodes = append(tp.nodes, n)
	}
	sort.Slice(tp.nodes, func(i, j int) bool { return tp.nodes[i].addr < tp.nodes[j].addr })
	if old := s.topo.Load(); old != nil {
		tp.prev = old.prev
		if len(old.shards) > 0 && !samePartition(&old.slots, len(old.shards), &tp.slots, len(tp.shards)) {
			tp.prev = &partition{slots: old.slots, shards: len(old.shards)}
		}
	}
	for _, sh := range tp.shards {
		for i, n := range sh.nodes {
			was := n.primary.Swap(i == 0)
			if was != (i == 0) {
				// A role change: the last poll describes the old role (a
				// demoted primary's said ready as a primary), so the node
				// is judged afresh, and polled at once.
				n.mu.Lock()
				n.replOK = false
				n.mu.Unlock()
				n.pollNow.Store(true)
			}
		}
	}
	s.topo.Store(tp)
	s.mu.Unlock()

	for _, n := range gone {
		if n.ejected.Load() {
			s.ejected.Add(-1)
		}
		n.ready.Store(false)
	}
	for _, n := range tp.nodes {
		s.assess(n)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// shardOf returns the shard of n in tp, or nil.
func (tp *topology) shardOf(n *node) *shard {
	for i := range tp.shards {
		for _, x := range tp.shards[i].nodes {
			if x == n {
				return &tp.shards[i]
			}
		}
	}
	return nil
}
