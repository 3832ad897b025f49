package redis

import "testing"

// TestReplicaRoundRules: a replica is ready only against its primary's
// offset from the same round (or, once proven, the primary's last answer
// while it does not answer), not after a connection change until a full
// round, and not once its last round is older than ReadinessInterval +
// pollTimeout; a node the map calls the primary is always read without
// READONLY.
func TestReplicaRoundRules(t *testing.T) {
	tr, p, r := fakeShardTier(t)
	s := tr.nodes
	linked := replState{linkUp: true, offset: 1000, hasFields: true}
	judge := func(ref pollRef) (bool, string) {
		r.mu.Lock()
		r.repl, r.replOK, r.replGen, r.ref, r.polledAt = linked, true, r.gen.Load(), ref, s.sinceStart()
		r.mu.Unlock()
		s.assess(r)
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ready.Load(), r.reason
	}
	now := s.sinceStart()
	if ok, why := judge(pollRef{offset: 1000, sent: now, fresh: true}); !ok {
		t.Fatalf("caught up in a full round: not ready (%s)", why)
	}
	if r.currentAt.Load() != now {
		t.Fatalf("currentAt %d, want the primary's poll %d", r.currentAt.Load(), now)
	}
	if ok, _ := judge(pollRef{offset: 1001, sent: now, fresh: true}); ok {
		t.Fatal("one byte short of the round's offset: ready")
	}
	if ok, _ := judge(pollRef{offset: 1000, sent: now}); ok {
		t.Fatal("a stand-in offset made a replica ready that was not proven")
	}
	judge(pollRef{offset: 1000, sent: now, fresh: true})
	if ok, why := judge(pollRef{offset: 900, sent: now}); !ok {
		t.Fatalf("proven, primary not answering: not ready (%s)", why)
	}
	r.unready("connection reopened")
	if ok, _ := judge(pollRef{offset: 900, sent: now}); ok {
		t.Fatal("after a new connection, a stand-in offset made it ready")
	}
	if ok, _ := judge(noRef); ok {
		t.Fatal("ready with nothing to compare with")
	}
	old := s.sinceStart() - int64(s.o.ReadinessInterval+pollTimeout) - 1
	if ok, _ := judge(pollRef{offset: 1000, sent: old, fresh: true}); ok {
		t.Fatal("ready from a round older than ReadinessInterval + pollTimeout")
	}
	judge(pollRef{offset: 1000, sent: s.sinceStart(), fresh: true})
	r.mu.Lock()
	r.ref.sent = old
	r.mu.Unlock()
	s.expire(r)
	if r.ready.Load() {
		t.Fatal("expire left a replica ready past its round's bound")
	}
	if ok, why := judge(pollRef{offset: 1000, sent: old}); !ok {
		t.Fatalf("a late round took away the proof: the stand-in of a primary that hung did not make it ready again (%s)", why)
	}

	p.ready.Store(true)
	r.ready.Store(true)
	r.currentAt.Store(0)
	for i := range 1000 {
		n, via, _ := s.pick(uint16(i))
		if via != (n == p) {
			t.Fatalf("%s read with viaPrimary %v", n.addr, via)
		}
	}
}
