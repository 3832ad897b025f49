package redis

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Replica readiness: a replica in full resync that takes traffic answers
// empty, and one that has finished a resync, or restarted from an old
// snapshot, answers from old data until it has applied the stream that
// followed. Liveness is not readiness: a replica takes reads only when
// its own INFO says it holds what its primary held a moment ago. Nodes are
// polled in the background with INFO replication persistence, never per
// request, in rounds: every ReadinessInterval while the shard is read
// (and at once after a node reconnects, comes back from ejection, changes
// role or rejoins the map) each shard's primary is polled first and its
// replicas once it has answered, so that the primary's master_repl_offset
// is a point the replicas must have reached when they are asked. A shard
// that no read was routed to since its last round is not polled: a fleet
// of idle processes sends no INFO. Its replicas' proof then runs out, and
// the first read skips them for the primary and asks for the round that
// proves them again, on the node set's next tick (50 ms). NodeStats asks
// for it too. A replica is ready when
//
//	role:slave, master_link_status:up, master_sync_in_progress:0, loading:0
//	(and async_loading:0), and its slave_repl_offset is at least the
//	primary's offset of the same round minus MaxReplicaLag (default 0);
//
// a replica linked and in sync but short of that offset is asked again
// every 2 ms until 20 ms after its primary answered (catchUpWait), then
// called not ready until the next round.
//
// The offset is the proof, whatever happened before: a replica that just
// finished a full resync is at the offset of its snapshot until it has
// applied the stream that followed, one restarted from an old snapshot at
// that snapshot's offset, so neither passes until it has caught up. The
// guarantee at the time of a read is therefore:
//
//	a replica takes reads only while, in a round begun at most
//	ReadinessInterval + pollTimeout (500 ms) earlier, it had applied its
//	primary's replication stream up to where the primary was when polled
//	at the round's start (less MaxReplicaLag bytes), within catchUpWait
//	(20 ms) of the primary's answer.
//
// A delete that had reached the primary before that round is on the
// replica. What the primary took since reaches the replica through
// asynchronous replication over a link that was up at the round: measured
// here (3+3 Cluster on one 2-CPU machine, 8 writers), 0.2 ms at the median
// and 1.3 ms at most from a SET's reply to the replica's answer; with the
// machine saturated (six busy loops), 30 ms at p99 and 240 ms at most. The
// polls cannot bound that part, and a link that stalls without breaking (a
// partition between a replica and its primary alone) can hold it up to the
// next round.
//
// Exceptions: when the primary does not answer its poll (frozen, or
// unreachable from here), its last answered offset stands in, but only for
// a replica that was proven in a full round before: a primary that answers
// no one takes no writes, and its replicas keep serving its slots. When the
// map's primary answers as a replica (a failover the map has not caught up
// with), there is nothing to compare with and its replicas wait for the
// map. A replica loses readiness the moment its connection is lost or a
// new one is dialled (it may have restarted empty), after a role change,
// or when its last round is older than the bound above, and regains it
// only from a full round whose poll went out on its current connection.
//
// A primary is ready unless it is loading. A node the map calls a primary
// is read without READONLY (routing.go), so one that stopped being the
// primary answers MOVED, not its old data.

// replState is what readiness needs from one INFO replication persistence.
type replState struct {
	primary   bool  // role:master
	linkUp    bool  // master_link_status:up
	syncing   bool  // master_sync_in_progress:1
	loading   bool  // loading:1, or async_loading:1 (a diskless load that serves the old data meanwhile)
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
	r.loading = info["loading"] == "1" || info["async_loading"] == "1"
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

// pollRef is a primary's offset, the point its replicas' polls are
// compared with.
type pollRef struct {
	offset int64 // master_repl_offset; -1 when there is none
	sent   int64 // sinceStart when the primary's poll was sent
	// fresh: polled in this round and answered before the replicas' polls
	// were sent. Otherwise offset is the primary's last answered one,
	// standing in while it does not answer (see the file comment).
	fresh bool
}

var noRef = pollRef{offset: -1}

// startRound claims the nodes of sh that are neither ejected nor being
// polled already, and polls them on a goroutine the Tier owns: the primary
// first, then its replicas against its offset.
func (s *nodeSet) startRound(sh shard) {
	var claimed []*node
	for _, n := range sh.nodes {
		if n.ejected.Load() {
			continue
		}
		n.mu.Lock()
		if !n.polling {
			n.polling = true
			claimed = append(claimed, n)
		}
		n.mu.Unlock()
	}
	if len(claimed) == 0 {
		return
	}
	sh.nodes[0].wanted.Store(false)
	sh.nodes[0].roundAt.Store(s.sinceStart())
	for _, n := range claimed {
		n.pollNow.Store(false)
	}
	if !s.t.goOwned(func() { s.round(sh.nodes[0], claimed) }) {
		for _, n := range claimed {
			n.mu.Lock()
			n.polling = false
			n.mu.Unlock()
		}
	}
}

// pollShard starts sh's round when one of its nodes asks for a poll at
// once (pollNow), or when a read was routed to the shard since its last
// round and that round is ReadinessInterval old. A shard nobody reads is
// not polled: its replicas' proof runs out (freshUntil), reads skip them
// and go to the primary, and the first such read asks for the round that
// proves them again, on the loop's next tick.
func (s *nodeSet) pollShard(sh shard) {
	p := sh.nodes[0]
	if slices.ContainsFunc(sh.nodes, func(n *node) bool { return n.pollNow.Load() }) ||
		(p.wanted.Load() && s.sinceStart()-p.roundAt.Load() >= int64(s.o.ReadinessInterval)) {
		s.startRound(sh)
	}
	if p.wanted.Load() {
		// Read since its round started: a replica whose rounds stall
		// says so, not ready. (An idle shard's replicas keep their state,
		// and reads skip them by freshUntil until they are polled.)
		for _, n := range sh.nodes {
			if !n.ejected.Load() {
				s.expire(n)
			}
		}
	}
}

// catchUpWait is how long after its primary answered a replica found
// behind the primary's offset is polled again (every catchUpPoll) before
// it is called not ready: a linked replica is a few hundred bytes behind at
// one poll in fifty in steady state, and reaches the offset within a
// millisecond or two.
const (
	catchUpWait = 20 * time.Millisecond
	catchUpPoll = 2 * time.Millisecond
)

// round polls p, the shard's primary in the map, if claimed holds it,
// then the replicas in claimed, concurrently, with p's offset as their
// reference. It returns when every poll has.
func (s *nodeSet) round(p *node, claimed []*node) {
	ref := noRef
	reps := claimed
	if claimed[0] == p {
		reps = claimed[1:]
		if rs, ok, sent := s.poll(p, noRef); ok && rs.primary {
			ref = pollRef{offset: rs.offset, sent: sent, fresh: true}
		}
	}
	answered := time.Now()
	if !ref.fresh {
		p.mu.Lock()
		if p.lastPrimary.sent != 0 && !(p.replOK && !p.repl.primary) {
			ref = p.lastPrimary // it answers no longer, or was not asked
		}
		p.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, n := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				gen, sent, rs, err := s.fetch(n)
				if err == nil && ref.fresh && behind(rs, ref.offset, s.o.MaxReplicaLag) &&
					time.Since(answered)+catchUpPoll <= catchUpWait {
					time.Sleep(catchUpPoll)
					continue
				}
				s.record(n, ref, gen, sent, rs, err)
				return
			}
		}()
	}
	wg.Wait()
}

// behind reports a replica that is linked and in sync but has not reached
// primaryOffset (less maxLag) yet.
func behind(r replState, primaryOffset, maxLag int64) bool {
	return !r.primary && r.linkUp && !r.syncing && !r.loading && r.offset >= 0 && primaryOffset-r.offset > maxLag
}

// poll asks n for INFO replication persistence and reassesses its
// readiness against ref, its primary's offset (noRef for a primary). It
// returns what n said, whether it counts, and when it was sent.
func (s *nodeSet) poll(n *node, ref pollRef) (rs replState, ok bool, sent int64) {
	gen, sent, rs, err := s.fetch(n)
	return rs, s.record(n, ref, gen, sent, rs, err), sent
}

// fetch sends n a poll; gen is n's connection generation and sent the
// sinceStart when it was sent.
func (s *nodeSet) fetch(n *node) (gen uint64, sent int64, rs replState, err error) {
	gen = n.gen.Load()
	sent = s.sinceStart()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	text, err := n.client.Do(ctx, n.client.B().Info().Section("replication").Section("persistence").Build()).ToString()
	cancel()
	if err == nil {
		rs, err = parseReplState(parseInfo(text))
	}
	return gen, sent, rs, err
}

// record keeps a poll's answer and reassesses n. A poll sent before n's
// connection changed is discarded and repeated. It reports whether the
// poll counts.
func (s *nodeSet) record(n *node, ref pollRef, gen uint64, sent int64, rs replState, err error) (ok bool) {
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
		ok = true
		n.polls.Add(1)
		n.repl, n.replGen, n.replOK = rs, gen, true
		n.ref, n.polledAt = ref, sent
		if rs.primary {
			n.lastPrimary = pollRef{offset: rs.offset, sent: sent}
		}
	}
	n.mu.Unlock()
	if err == nil && rs.primary != n.primary.Load() {
		// The node changed role since the map was read (a failover): the
		// map is behind.
		s.kickTopology()
	}
	s.assess(n)
	return ok
}

// overdue is how old a replica's last round may be, from the moment its
// primary was polled, before the replica stops taking reads: one interval
// and one poll's timeout.
func (s *nodeSet) overdue() int64 { return int64(s.o.ReadinessInterval + pollTimeout) }

// assess sets n's readiness from its latest poll.
func (s *nodeSet) assess(n *node) {
	isPrimary := n.primary.Load()
	now := s.sinceStart()
	n.mu.Lock()
	defer n.mu.Unlock()
	var ready, late bool
	var reason string
	current := int64(0) // see node.currentAt
	fresh := int64(0)   // see node.freshUntil; 0 for no bound
	switch {
	case n.replOK && n.replGen == n.gen.Load() && isPrimary && !n.repl.primary:
		// A demoted primary answers READONLY reads from its old data until
		// its resync, which can take seconds to begin: it takes no reads
		// until the map, refreshed at once (poll), lists it as a replica.
		// (Reads sent to it as the primary get MOVED, routing.go.)
		ready, reason = false, "a replica, the primary in the slot map"
	case n.replOK && n.replGen == n.gen.Load() && (isPrimary || n.repl.primary):
		// A primary, or a node the map still lists as a replica that has
		// been promoted: it holds the slot's latest data.
		ready, reason = readiness(n.repl, -1, 0)
		current = n.polledAt
	case n.replOK && n.replGen == n.gen.Load():
		ready, reason = readiness(n.repl, n.ref.offset, s.o.MaxReplicaLag)
		proofAt := n.ref.sent
		if !n.ref.fresh {
			proofAt = n.polledAt
		}
		switch {
		case !ready:
		case n.ref.offset < 0:
			ready, reason = false, "no offset of its primary to compare with"
		case !n.ref.fresh && !n.proven:
			ready, reason = false, "its primary did not answer, and it has not been caught up in a full round since it (re)joined"
		case now-proofAt > s.overdue():
			ready, reason, late = false, "last readiness round too old", true
		}
		fresh = proofAt + s.overdue()
		if ready && n.repl.offset >= n.ref.offset {
			current = n.ref.sent
		}
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
	if ready || !late {
		// A round that came late says nothing about the replica: a primary
		// that hangs holds its round up to pollTimeout, and the replica,
		// once polled, may be judged against the stand-in again.
		n.proven = ready
	}
	if current > n.currentAt.Load() || !ready {
		n.currentAt.Store(current)
	}
	switch {
	case !ready:
		n.freshUntil.Store(0)
	case fresh == 0:
		n.freshUntil.Store(math.MaxInt64)
	default:
		n.freshUntil.Store(fresh)
	}
	if ready && !n.ready.Load() {
		n.readies++
	}
	n.ready.Store(ready)
	n.reason = reason
}

// expire takes reads from a replica whose last round is older than the
// bound (see overdue): the rounds stalled, or its polls hang.
func (s *nodeSet) expire(n *node) {
	if n.primary.Load() || !n.ready.Load() {
		return
	}
	n.mu.Lock()
	proofAt := n.ref.sent
	if !n.ref.fresh {
		proofAt = n.polledAt
	}
	n.mu.Unlock()
	if s.sinceStart()-proofAt > s.overdue() {
		s.assess(n)
	}
}

// connOpened and connLost are called by a node's watched connections. A new
// or lost connection may mean the server restarted: a replica takes no reads
// until a poll on the new connection says it is ready. connOpened
// reports false once n is closed: the connection must not be used.
func (n *node) connOpened(c *watchedConn) bool {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return false
	}
	n.conns[c] = struct{}{}
	n.mu.Unlock()
	n.unready("connection reopened")
	return true
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
		n.proven = false
		n.currentAt.Store(0)
		n.reason = reason
		n.mu.Unlock()
	}
}
