package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Reads over a Sentinel group's replicas. The group is one shard over
// every slot to the machinery of Cluster replicas (nodes.go): its nodes
// are the primary the tier follows and the replicas that primary lists in
// INFO replication, learnt again on each move, at once after a lost node
// connection or a node found in another role, every TopologyInterval
// while the group is read and every SteadyTopologyInterval otherwise. A
// replica takes reads only by the readiness rule of readiness.go, is
// ejected as a Cluster node is (ejector.go), and a miss it answers is
// read again from the primary. Reads that go to the primary take the
// standalone path through the client that follows the sentinels, so the
// breaker and the silent-server rule still govern the primary, as they
// did before replicas took reads.
//
// A process reads its own writes and invalidations as in a Cluster
// (routing.go): a slot this Tier wrote is read from the primary for
// PrimaryAfterWrite, then only from replicas known to hold what their
// primary held after the write. Outside a Cluster the client's commands
// carry no slot, so the writes' keys are read from the commands
// themselves (noteKeyWrites).
//
// GetMany's one MGET goes to one node by the same rules (sentinelMGet),
// picked as for a slot not written: the keys of slots the picked replica
// may not serve yet (PrimaryAfterWrite), those it misses, and all of them
// when it fails with budget left, are read from the primary in a second
// MGET. Both share one ReadBudget, so that a frozen replica costs a call
// no more than its budget, as it costs a Get.
//
// ClusterOptions.Disabled turns replica reads off, as it does in a
// Cluster: every read then goes to the primary.

// refreshSentinel reads the primary's replicas from its INFO replication
// and installs the group as one shard: the primary, then its replicas.
func (s *nodeSet) refreshSentinel() error {
	pc := s.t.sentinel.cur.Load()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	text, err := pc.client.Do(ctx, pc.client.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return fmt.Errorf("redis tier: INFO replication of %s: %w", pc.addr, err)
	}
	addrs, err := sentinelNodes(pc.addr, parseInfo(text))
	if err != nil {
		return err
	}
	s.install(slotMap{{from: 0, to: slotCount - 1, addrs: addrs}})
	return nil
}

// sentinelNodes returns the primary at addr and the replicas its INFO
// replication lists ("slave0:ip=...,port=...,state=...").
func sentinelNodes(addr string, info map[string]string) ([]string, error) {
	if info["role"] != "master" {
		return nil, fmt.Errorf("redis tier: %s, the primary followed, reports role %q", addr, info["role"])
	}
	addrs := []string{addr}
	for i := 0; ; i++ {
		v, ok := info["slave"+strconv.Itoa(i)]
		if !ok {
			break
		}
		var ip, port string
		for _, f := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(f, "=")
			switch k {
			case "ip":
				ip = val
			case "port":
				port = val
			}
		}
		if ip == "" || port == "" {
			return nil, errors.New("redis tier: INFO replication lists a replica without ip or port: " + v)
		}
		if a := net.JoinHostPort(ip, port); a != addr && !contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// readLately reports whether the group was read within two readiness
// intervals: its replicas are then looked for every TopologyInterval, so
// that one that joins (an old primary back as a replica) takes reads
// within seconds, and an idle process asks the primary no more than a
// Cluster's idle process asks a node.
func (s *nodeSet) readLately() bool {
	tp := s.topo.Load()
	if tp == nil || len(tp.shards) == 0 {
		return false
	}
	p := tp.shards[0].nodes[0]
	at := p.roundAt.Load()
	return p.wanted.Load() || (at != 0 && s.sinceStart()-at < int64(2*s.o.ReadinessInterval))
}

// sentinelGet is getFull in the Sentinel shape with replica reads: from
// a ready replica picked as a Cluster read picks (routing.go), its miss,
// or its failure with budget left (a replica just killed fails fast,
// before readiness knows), read again from the primary within the same
// budget; from the primary otherwise. A replica that used up the budget
// fails the read, as sentinelMGet's group fails.
func (t *Tier) sentinelGet(ctx context.Context, rs *nodeSet, gen uint64, key, full string) ([]byte, bool, error) {
	rctx, cancel := t.readContext(ctx)
	defer cancel()
	n, viaPrimary, _ := rs.pick(slot(full))
	if n != nil && !viaPrimary {
		res, o := t.readFrom(ctx, rctx, n, n.client, func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(full).Build() })
		err := res.Error()
		if err == nil || (!rueidis.IsRedisNil(err) && rctx.Err() != nil) {
			t.br.Done(gen, o)
			return t.getResult(key, res)
		}
	}
	b, found, err := t.primaryGetWithin(ctx, rctx, gen, key, full)
	if p := rs.primaryFor(0); p != nil {
		p.requests.add(1)
		if err == nil {
			p.reads.add(1)
		}
	}
	return b, found, err
}

// pickGroup returns the replica a GetMany's one MGET is read from, picked
// as pick picks for a slot not written: nil when the pick is the primary
// or no node is eligible, and the MGET goes to the primary.
func (s *nodeSet) pickGroup() *node {
	tp := s.topo.Load()
	if tp == nil || len(tp.shards) == 0 {
		return nil
	}
	n, viaPrimary := s.pickIn(tp.shards[0].nodes, 0)
	if viaPrimary {
		return nil
	}
	return n
}

// replicaServes reports whether n, a replica, may be read for a key of
// slot sl by pick's rule: not while this Tier's write of the slot is
// within PrimaryAfterWrite (the primary in), nor until n is known to hold
// what the primary held after it.
func (s *nodeSet) replicaServes(n, p *node, sl uint16) bool {
	w := s.written[sl].Load()
	if w == 0 {
		return true
	}
	if s.recentlyWritten(w) && p != nil && !p.ejected.Load() {
		return false
	}
	return n.currentAt.Load() > w
}

// sentinelMGet is GetMany's MGET of its one group in the Sentinel shape,
// from n, a replica pickGroup picked. The keys n may not serve
// (replicaServes), those it misses (it may lag), and all of them when it
// fails with budget left in rctx, are read from the primary in one MGET,
// within the same budget: a replica that timed out leaves none, and the
// group fails as a Get from it would. It returns the values in the
// group's key order and reports to the breaker in gen as sentinelGet
// does: the primary's answer when the primary was read, n's otherwise.
func (t *Tier) sentinelMGet(ctx, rctx context.Context, rs *nodeSet, n *node, gen uint64, g group) ([]rueidis.RedisMessage, error) {
	p := rs.primaryFor(0)
	// keys go to n; at[i] is keys[i]'s index in g.keys, at nil when keys
	// is all of g.keys (the common case, with no copy).
	keys, at := g.keys, []int(nil)
	var fromPrimary []int // indexes in g.keys
	for j, k := range g.keys {
		if rs.replicaServes(n, p, slot(k)) {
			if at != nil {
				keys, at = append(keys, k), append(at, j)
			}
			continue
		}
		if at == nil {
			keys = append(make([]string, 0, len(g.keys)), g.keys[:j]...)
			at = make([]int, j, len(g.keys))
			for i := range at {
				at[i] = i
			}
		}
		fromPrimary = append(fromPrimary, j)
	}
	vals := make([]rueidis.RedisMessage, len(g.keys))
	if len(keys) > 0 {
		n.requests.add(1)
		cmd := n.client.B().Mget().Key(keys...).Build()
		res := t.callGuarded(rctx, n, func() rueidis.RedisResult { return n.client.Do(rctx, cmd) })
		o := t.nodeOutcome(ctx, n, res.Error())
		arr, err := res.ToArray()
		if err == nil && len(arr) != len(keys) {
			err = fmt.Errorf("MGET of %d keys answered %d values", len(keys), len(arr))
		}
		switch {
		case err == nil:
			n.reads.add(len(keys))
			for i, m := range arr {
				j := i
				if at != nil {
					j = at[i]
				}
				if m.IsNil() {
					fromPrimary = append(fromPrimary, j)
				} else {
					vals[j] = m
				}
			}
		case rctx.Err() != nil:
			t.br.Done(gen, o)
			return nil, err
		default:
			if at == nil {
				fromPrimary = fromPrimary[:0]
				for j := range g.keys {
					fromPrimary = append(fromPrimary, j)
				}
			} else {
				fromPrimary = append(fromPrimary, at...)
			}
		}
		if len(fromPrimary) == 0 {
			t.br.Done(gen, o)
			return vals, nil
		}
	}
	pk := make([]string, len(fromPrimary))
	for i, j := range fromPrimary {
		pk[i] = g.keys[j]
	}
	arr, err := t.primaryMGet(ctx, rctx, gen, p, pk)
	if err != nil {
		return nil, err
	}
	for i, j := range fromPrimary {
		vals[j] = arr[i]
	}
	return vals, nil
}

// primaryMGet is an MGET of keys on a Sentinel group's primary, p, by
// primaryGet's standalone path, reported to the breaker in gen.
func (t *Tier) primaryMGet(ctx, rctx context.Context, gen uint64, p *node, keys []string) ([]rueidis.RedisMessage, error) {
	cmd := t.client.B().Mget().Key(keys...).Build()
	var res rueidis.RedisResult
	if t.guarded() {
		res = guard(rctx, t, func() rueidis.RedisResult { return t.client.Do(rctx, cmd) }, rueidis.NewErrorResult)
	} else {
		res = t.client.Do(rctx, cmd)
	}
	arr, err := res.ToArray()
	if err == nil && len(arr) != len(keys) {
		err = fmt.Errorf("MGET of %d keys answered %d values", len(keys), len(arr))
	}
	t.end(ctx, gen, err)
	if p != nil {
		p.requests.add(1)
		if err == nil {
			p.reads.add(len(keys))
		}
	}
	return arr, err
}

// noteKeyWrites is noteWrites for a client whose commands carry no slot
// (the Sentinel shape's): it finds the slots of a write's keys in its
// arguments.
type noteKeyWrites struct {
	rueidis.Client
	s *nodeSet
}

func (w noteKeyWrites) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cmd.IsReadOnly() {
		return w.Client.Do(ctx, cmd)
	}
	slots := writtenSlots(cmd.Commands()) // rueidis may recycle cmd once answered
	w.s.wroteAll(slots)
	defer w.s.wroteAll(slots)
	return w.Client.Do(ctx, cmd)
}

func (w noteKeyWrites) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	var slots []uint16
	for _, cmd := range multi {
		if !cmd.IsReadOnly() {
			slots = append(slots, writtenSlots(cmd.Commands())...)
		}
	}
	w.s.wroteAll(slots)
	defer w.s.wroteAll(slots)
	return w.Client.DoMulti(ctx, multi...)
}

func (s *nodeSet) wroteAll(slots []uint16) {
	for _, sl := range slots {
		s.wrote(sl)
	}
}

// writtenSlots returns the slots of the keys a write command's arguments
// name: every argument of DEL and UNLINK, a script's declared keys, the
// first argument of the other commands the tier sends, none of keyless
// ones (PUBLISH's channel is no key).
func writtenSlots(args []string) []uint16 {
	if len(args) < 2 {
		return nil
	}
	var keys []string
	switch strings.ToUpper(args[0]) {
	case "PUBLISH", "SPUBLISH", "PING", "ECHO", "SCRIPT", "CLIENT", "HELLO", "AUTH", "SELECT",
		"WAIT", "ROLE", "INFO", "CONFIG", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE":
		return nil
	case "DEL", "UNLINK":
		keys = args[1:]
	case "EVAL", "EVALSHA", "FCALL":
		if len(args) < 3 {
			return nil
		}
		n, err := strconv.Atoi(args[2])
		if err != nil || n < 0 || 3+n > len(args) {
			return nil
		}
		keys = args[3 : 3+n]
	case "MSET", "MSETNX":
		for i := 1; i < len(args); i += 2 {
			keys = append(keys, args[i])
		}
	default:
		keys = args[1:2]
	}
	slots := make([]uint16, len(keys))
	for i, k := range keys {
		slots[i] = slot(k)
	}
	return slots
}
