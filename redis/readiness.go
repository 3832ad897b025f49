package redis

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Replica readiness: a replica in full resync that takes traffic answers
// empty, and the write storm that follows can break the resync again.
// Liveness is not readiness: a replica takes reads only when its own INFO
// says it holds its primary's data. Every node is polled in the background,
// all of them at once every ReadinessInterval, with INFO replication
// persistence; never per request. A replica is ready when
//
//	role:slave, master_link_status:up, master_sync_in_progress:0, loading:0,
//	and its slave_repl_offset is within MaxReplicaLag of the primary's
//	master_repl_offset (from the primary's latest poll).
//
// A primary is ready unless it is loading. Besides the polls, a replica
// loses readiness the moment its connection is lost or a new one is dialled
// (it may have restarted empty), and regains it only from a poll sent on the
// new connection.

// replState is what readiness needs from one INFO replication persistence.
type replState struct {
	primary   bool  // role:master
	linkUp    bool  // master_link_status:up
	syncing   bool  // master_sync_in_progress:1
	loading   bool  // loading:1
	offset    int64 // master_repl_offset on a primary, slave_repl_offset on a replica
	hasFields bool  // the fields readiness needs were present
}

// parseInfo reads the "key:value" lines of an INFO reply.
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// parseReplState extracts replState from INFO replication persistence.
func parseReplState(info map[string]string) (replState, error) {
	var r replState
	role, ok := info["role"]
	if !ok {
		return r, fmt.Errorf("INFO without role")
	}
	_, hasLoading := info["loading"]
	r.loading = info["loading"] == "1"
	switch role {
	case "master":
		r.primary = true
		off, err := strconv.ParseInt(info["master_repl_offset"], 10, 64)
		if err != nil {
			return r, fmt.Errorf("master_repl_offset %q", info["master_repl_offset"])
		}
		r.offset = off
		r.hasFields = hasLoading
	case "slave":
		r.linkUp = info["master_link_status"] == "up"
		r.syncing = info["master_sync_in_progress"] != "0"
		off, err := strconv.ParseInt(info["slave_repl_offset"], 10, 64)
		if err != nil {
			// Absent while the first sync has not begun.
			off = -1
		}
		r.offset = off
		_, hasSync := info["master_sync_in_progress"]
		r.hasFields = hasLoading && hasSync
	default:
		return r, fmt.Errorf("role %q", role)
	}
	return r, nil
}

// readiness decides whether a node may take reads, and if not, why.
// primaryOffset is the latest polled offset of the replica's primary, or -1
// when unknown (the lag check is then skipped: the primary may be the node
// that failed, and the replica's own link state still rules).
func readiness(r replState, primaryOffset, maxLag int64) (ready bool, reason string) {
	switch {
	case !r.hasFields:
		return false, "INFO lacks loading or sync fields"
	case r.loading:
		return false, "loading"
	case r.primary:
		return true, ""
	case !r.linkUp:
		return false, "master link down"
	case r.syncing:
		return false, "sync in progress"
	case r.offset < 0:
		return false, "no replication offset"
	case primaryOffset >= 0 && primaryOffset-r.offset > maxLag:
		return false, fmt.Sprintf("lag %d bytes", primaryOffset-r.offset)
	}
	return true, ""
}

// poll asks n for INFO replication persistence and reassesses its
// readiness. A poll sent before n's connection changed is discarded and
// repeated.
func (s *nodeSet) poll(n *node) {
	gen := n.gen.Load()
	sent := s.sinceStart()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	text, err := n.client.Do(ctx, n.client.B().Info().Section("replication").Section("persistence").Build()).ToString()
	cancel()
	var rs replState
	if err == nil {
		rs, err = parseReplState(parseInfo(text))
	}
	n.mu.Lock()
	n.polling = false
	switch {
	case err != nil:
		n.pollErrs.Add(1)
		n.replOK = false
		n.reason = "poll failed: " + err.Error()
	case n.gen.Load() != gen:
		n.pollNow.Store(true)
	default:
		n.polls.Add(1)
		n.repl, n.replGen, n.replOK = rs, gen, true
		n.polledAt.Store(sent)
	}
	n.mu.Unlock()
	if err == nil && rs.primary != n.primary.Load() {
		// The node changed role since the map was read (a failover): the
		// map is behind.
		s.kickTopology()
	}
	s.assess(n)
}

// assess sets n's readiness from its latest poll.
func (s *nodeSet) assess(n *node) {
	primaryOffset := int64(-1)
	isPrimary := n.primary.Load()
	if !isPrimary {
		if sh := s.topo.Load().shardOf(n); sh != nil {
			p := sh.nodes[0]
			p.mu.Lock()
			if p.replOK && p.repl.primary {
				primaryOffset = p.repl.offset
			}
			p.mu.Unlock()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var ready bool
	var reason string
	switch {
	case n.replOK && n.replGen == n.gen.Load() && isPrimary && !n.repl.primary:
		// A demoted primary answers READONLY reads from its old data until
		// its resync, which can take seconds to begin: it takes no reads
		// until the map, refreshed at once (poll), lists it as a replica.
		ready, reason = false, "a replica, the primary in the slot map"
	case n.replOK && n.replGen == n.gen.Load():
		ready, reason = readiness(n.repl, primaryOffset, s.o.MaxReplicaLag)
	case isPrimary:
		// Not polled on this connection yet: a primary serves its slots
		// unless it was loading when last seen.
		ready = !(n.replOK && n.repl.loading)
		if !ready {
			reason = "loading"
		}
	default:
		ready = false
		if reason = n.reason; reason == "" || n.replOK {
			reason = "not polled since connecting"
		}
	}
	if ready && !n.ready.Load() {
		n.readies++
	}
	n.ready.Store(ready)
	n.reason = reason
}

// connOpened and connLost are called by a node's watched connections. A new
// or lost connection may mean the server restarted: a replica takes no reads
// until a poll on the new connection says it is ready.
func (n *node) connOpened(c *watchedConn) {
	n.mu.Lock()
	n.conns[c] = struct{}{}
	n.mu.Unlock()
	n.unready("connection reopened")
}

func (n *node) connLost(c *watchedConn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
	n.unready("connection lost")
	n.set.kickTopology() // a lost node may mean a failover under way
}

func (n *node) unready(reason string) {
	n.gen.Add(1)
	n.pollNow.Store(true)
	if !n.primary.Load() {
		n.mu.Lock()
		n.ready.Store(false)
		n.reason = reason
		n.mu.Unlock()
	}
}
