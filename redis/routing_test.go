package redis

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// fakeShardTier is a Tier whose slot map has one shard (a primary and one
// replica) serving every slot, and no server: only paths that never reach
// Redis may be taken.
func fakeShardTier(t *testing.T) (*Tier, *node, *node) {
	t.Helper()
	o, bs, err := Options{Addrs: []string{"127.0.0.1:1"}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	br, err := breaker.New(bs, o.Clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	// A client to nowhere, for its command builder only.
	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}, ForceSingleClient: true, DisableCache: true})
	if c == nil {
		t.Fatal("no client")
	}
	t.Cleanup(c.Close)
	tr := &Tier{opts: o, cluster: true, br: br, client: c}
	tr.driver = (*tierDriver)(tr)
	s := &nodeSet{t: tr, o: o.Cluster, clock: time.Now, start: time.Now(), written: make([]atomic.Int64, slotCount)}
	p := &node{addr: "p", set: s, ej: newEjector(o.Cluster)}
	r := &node{addr: "r", set: s, ej: newEjector(o.Cluster)}
	tp := &topology{shards: []shard{{nodes: []*node{p, r}}}, nodes: []*node{p, r}}
	p.primary.Store(true)
	s.topo.Store(tp)
	tr.nodes = s
	return tr, p, r
}

// TestRoutingChoices: reads pick among the eligible nodes only; recently
// written slots read from the primary; with the primary ejected the ready
// replica takes every read; with no eligible node a read returns at once
// with ErrBypassed, counted as a bypass and not fed to the breaker.
func TestRoutingChoices(t *testing.T) {
	tr, p, r := fakeShardTier(t)
	s := tr.nodes
	count := func() map[string]int {
		got := map[string]int{}
		for i := 0; i < 2000; i++ {
			n, _, covered := s.pick(uint16(i % slotCount))
			if !covered {
				t.Fatal("slot not covered")
			}
			if n == nil {
				got["none"]++
			} else {
				got[n.addr]++
			}
		}
		return got
	}
	p.ready.Store(true)
	if got := count(); got["p"] != 2000 {
		t.Fatalf("replica not ready yet: %v", got)
	}
	r.ready.Store(true)
	r.freshUntil.Store(math.MaxInt64)
	if got := count(); got["p"] < 850 || got["r"] < 850 {
		t.Fatalf("uniform choice: %v", got)
	}
	// A replica whose last round no longer proves it (a shard not read
	// for a while) is skipped, and the reads ask for a round.
	r.freshUntil.Store(s.sinceStart())
	p.wanted.Store(false)
	if got := count(); got["p"] != 2000 || !p.wanted.Load() {
		t.Fatalf("replica past its proof: %v, round wanted %v", got, p.wanted.Load())
	}
	r.freshUntil.Store(math.MaxInt64)
	// Health, which the Cache reads four times a second, asks for no
	// round; NodeStats does.
	p.wanted.Store(false)
	if tr.Health(); p.wanted.Load() {
		t.Fatal("Health asked for a readiness round")
	}
	if tr.NodeStats(); !p.wanted.Load() {
		t.Fatal("NodeStats asked for no readiness round")
	}
	s.o.PrimaryAfterWrite = time.Minute
	s.wrote(5)
	for i := 0; i < 100; i++ {
		if n, via, _ := s.pick(5); n != p || !via {
			t.Fatal("a slot just written was not read from its primary through the Cluster client")
		}
	}
	// Past PrimaryAfterWrite, a node takes a written slot's reads only once
	// known to hold what the primary held since the write.
	s.o.PrimaryAfterWrite = time.Nanosecond
	s.wrote(6)
	time.Sleep(time.Millisecond)
	if n, via, _ := s.pick(6); n != p || !via {
		t.Fatal("a written slot read over READONLY from a node not polled since the write")
	}
	p.currentAt.Store(s.sinceStart())
	if n, via, _ := s.pick(6); n != p || !via {
		t.Fatalf("the primary, polled since the write, is read over READONLY (via primary %v)", via)
	}
	s.o.PrimaryAfterWrite = time.Minute
	p.ejected.Store(true)
	if n, _, _ := s.pick(5); n != nil {
		t.Fatalf("primary ejected: a slot just written read from %s, not polled since the write", n.addr)
	}
	r.currentAt.Store(s.sinceStart())
	if got := count(); got["r"] != 2000 {
		t.Fatalf("primary ejected: %v", got)
	}
	r.ready.Store(false)
	if got := count(); got["none"] != 2000 {
		t.Fatalf("nothing eligible: %v", got)
	}

	start := time.Now()
	_, _, err := tr.Get(context.Background(), "ns:k")
	if !errors.Is(err, tier.ErrBypassed) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("Get with no eligible node: %v after %v", err, time.Since(start))
	}
	ls, err := tr.GetMany(context.Background(), []string{"ns:a", "ns:b"})
	if !errors.Is(err, tier.ErrBypassed) || !errors.Is(ls[0].Err, tier.ErrBypassed) {
		t.Fatalf("GetMany with no eligible node: %v %+v", err, ls)
	}
	st := tr.Stats()
	if st.Bypassed != 3 || st.Errors != 0 || st.BreakerState != BreakerClosed {
		t.Fatalf("stats %+v", st)
	}
	// Writes to an ejected primary are bypassed too, without a client.
	if err := tr.Set(context.Background(), tier.Item{Key: "ns:a", Value: []byte("v"), TTL: time.Minute}); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("Set to an ejected primary: %v", err)
	}
	if err := tr.Delete(context.Background(), "ns:a"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("Delete on an ejected primary: %v", err)
	}
	if st := tr.Stats(); st.SetBypassed != 1 || st.DelBypassed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStandaloneHasNoNodes: a standalone server keeps the plain path.
func TestStandaloneHasNoNodes(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	if tr.Cluster() || tr.nodes != nil || tr.NodeStats() != nil {
		t.Fatal("per-node health on a standalone server")
	}
}
