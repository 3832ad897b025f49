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
// GetMany reads from the primary only.
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
// a ready replica picked as a Cluster read picks (routing.go), its miss
// read again from the primary; from the primary otherwise.
func (t *Tier) sentinelGet(ctx context.Context, rs *nodeSet, gen uint64, key, full string) ([]byte, bool, error) {
	n, viaPrimary, _ := rs.pick(slot(full))
	if n != nil && !viaPrimary {
		rctx, cancel := t.readContext(ctx)
		res, o := t.readFrom(ctx, rctx, n, n.client, func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(full).Build() })
		cancel()
		if !hasMiss(res) {
			t.br.Done(gen, o)
			return t.getResult(key, res)
		}
	}
	b, found, err := t.primaryGet(ctx, gen, key, full)
	if p := rs.primaryFor(0); p != nil {
		p.requests.add(1)
		if err == nil {
			p.reads.add(1)
		}
	}
	return b, found, err
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
