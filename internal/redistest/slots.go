package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Topology changes done the way an operator does them, step by step, so
// that a test can read in between: a slot migration (MigrateSlot, then
// Migration.MoveKeys and Migration.Finish), a failover (Failover), and a
// demoted primary that keeps its old data (BlockSync).

// Migration is a hash slot being moved from one primary to another. While
// it is under way the source answers ASK for the keys it no longer has and
// the target serves those keys to clients that send ASKING first.
type Migration struct {
	c        *RedisCluster
	Slot     int
	From, To *Server
	toID     string
}

// MigrateSlot starts moving slot from the primary from to the primary to,
// as redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING on the
// target, MIGRATING on the source. It then moves the first keysFirst keys
// of the slot with MIGRATE (all of them when keysFirst is negative) and
// returns the migration half done: finish it with Finish.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot int, from, to *Server, keysFirst int) (*Migration, error) {
	fromID, err := from.NodeID(ctx)
	if err != nil {
		return nil, err
	}
	toID, err := to.NodeID(ctx)
	if err != nil {
		return nil, err
	}
	s := strconv.Itoa(slot)
	if _, err := to.CLI(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		return nil, err
	}
	if _, err := from.CLI(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return nil, err
	}
	m := &Migration{c: c, Slot: slot, From: from, To: to, toID: toID}
	if keysFirst != 0 {
		if _, err := m.MoveKeys(ctx, keysFirst); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// MoveKeys moves up to n keys of the slot (all that are left when n is
// negative) from the source to the target with MIGRATE, and returns how
// many it moved.
func (m *Migration) MoveKeys(ctx context.Context, n int) (int, error) {
	moved := 0
	for n < 0 || moved < n {
		batch := 100
		if n >= 0 {
			batch = min(batch, n-moved)
		}
		out, err := m.From.CLI(ctx, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(m.Slot), strconv.Itoa(batch))
		if err != nil {
			return moved, err
		}
		keys := strings.Fields(out)
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.To.Port()), "", "0", "5000", "KEYS"}
		if out, err := m.From.CLI(ctx, append(args, keys...)...); err != nil || out != "OK" {
			return moved, fmt.Errorf("redistest: MIGRATE %d keys of slot %d: %q %v", len(keys), m.Slot, out, err)
		}
		moved += len(keys)
	}
	return moved, nil
}

// Finish moves the keys left and assigns the slot to the target: CLUSTER
// SETSLOT NODE on the target, then the source, then the other primaries
// (replicas refuse SETSLOT and learn it from the cluster bus). It returns
// when every node that answers says the target serves the slot.
func (m *Migration) Finish(ctx context.Context) error {
	if _, err := m.MoveKeys(ctx, -1); err != nil {
		return err
	}
	primaries := []*Server{m.To, m.From}
	for _, p := range m.c.Primaries(ctx) {
		if p != m.To && p != m.From {
			primaries = append(primaries, p)
		}
	}
	for _, p := range primaries {
		if _, err := p.CLI(ctx, "CLUSTER", "SETSLOT", strconv.Itoa(m.Slot), "NODE", m.toID); err != nil {
			return err
		}
	}
	return m.c.waitOwner(ctx, m.Slot, m.To)
}

// waitOwner waits until every node that answers sees owner as the primary
// of slot.
func (c *RedisCluster) waitOwner(ctx context.Context, slot int, owner *Server) error {
	return poll(ctx, func(ctx context.Context) error {
		for _, n := range c.nodes {
			nodes, err := n.CLI(ctx, "CLUSTER", "NODES")
			if err != nil {
				continue // a killed or frozen node has no say
			}
			if got := primaryForSlot(nodes, slot); got != owner.Addr() {
				return fmt.Errorf("%s sees slot %d on %q, want %s", n.Addr(), slot, got, owner.Addr())
			}
		}
		return nil
	})
}

// Failover promotes replica with CLUSTER FAILOVER, or with CLUSTER FAILOVER
// TAKEOVER when takeover is set (no agreement from the other primaries, no
// handshake with the old primary: the old primary learns it was demoted
// from the cluster bus). It returns when replica reports role master and
// its old primary, which it also returns, reports role slave.
func (c *RedisCluster) Failover(ctx context.Context, replica *Server, takeover bool) (*Server, error) {
	info, err := replica.Info(ctx, "replication")
	if err != nil {
		return nil, err
	}
	if info["role"] != "slave" {
		return nil, fmt.Errorf("redistest: %s is not a replica", replica.Addr())
	}
	var old *Server
	for _, n := range c.nodes {
		if strconv.Itoa(n.Port()) == info["master_port"] {
			old = n
		}
	}
	if old == nil {
		return nil, fmt.Errorf("redistest: %s replicates unknown port %s", replica.Addr(), info["master_port"])
	}
	args := []string{"CLUSTER", "FAILOVER"}
	if takeover {
		args = append(args, "TAKEOVER")
	}
	if _, err := replica.CLI(ctx, args...); err != nil {
		return nil, err
	}
	// A manual failover (without TAKEOVER) gives up after Redis's own
	// 5 s manual-failover timeout when the replica cannot reach its
	// primary's offset in time — a replica still in the full resync that
	// follows an earlier TAKEOVER, say. Ask again every 6 s until the
	// caller's deadline, as an operator would.
	asked := time.Now()
	err = poll(ctx, func(ctx context.Context) error {
		if !takeover && time.Since(asked) > 6*time.Second {
			if info, err := replica.Info(ctx, "replication"); err == nil && info["role"] == "slave" {
				_, _ = replica.CLI(ctx, args...)
				asked = time.Now()
			}
		}
		for _, x := range []struct {
			s    *Server
			role string
		}{{replica, "master"}, {old, "slave"}} {
			info, err := x.s.Info(ctx, "replication")
			if err != nil {
				return err
			}
			if info["role"] != x.role {
				return fmt.Errorf("%s has role %s, want %s", x.s.Addr(), info["role"], x.role)
			}
		}
		return nil
	})
	return old, err
}

// ReplicaOf returns a node that reports being a replica of primary.
func (c *RedisCluster) ReplicaOf(ctx context.Context, primary *Server) (*Server, error) {
	for _, r := range c.Replicas(ctx) {
		info, err := r.Info(ctx, "replication")
		if err == nil && info["master_port"] == strconv.Itoa(primary.Port()) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("redistest: no replica of %s", primary.Addr())
}

// noSuchUser is the replication user BlockSync sets: no server has it.
const noSuchUser = "redistest-no-such-user"

// BlockSync makes s, whenever it is or becomes a replica, unable to
// authenticate to its primary (masteruser names a user no server has), so
// it keeps the data it holds and takes no resync. That is what a demoted
// primary looks like while its resync has not begun yet: it still answers
// READONLY reads, from its old data. UnblockSync undoes it.
func (s *Process) BlockSync(ctx context.Context) error {
	_, err := s.CLI(ctx, "CONFIG", "SET", "masteruser", noSuchUser, "masterauth", "x")
	return err
}

// UnblockSync lets s sync with its primary again.
func (s *Process) UnblockSync(ctx context.Context) error {
	_, err := s.CLI(ctx, "CONFIG", "SET", "masteruser", "", "masterauth", "")
	return err
}

// poll calls check every 20 ms until it returns nil or ctx is done. Each
// call gets at most a second.
func poll(ctx context.Context, check func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := check(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
