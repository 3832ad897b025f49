package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// levelProcess is one process of TestLevelingSparesTheLoneNode: its Tier
// and a namespace over it that keeps no key in the hot tier, so that every
// read goes to Redis or, shed, to last-known-good.
type levelProcess struct {
	tr *Tier
	ns *holdfast.Namespace
}

func newLevelProcess(t *testing.T, addrs []string, levelAbove float64) levelProcess {
	t.Helper()
	tr := newTier(t, Options{Addrs: addrs, KeyPrefix: "lv:", ReadBudget: 500 * time.Millisecond,
		Cluster: ClusterOptions{LevelAbove: levelAbove}})
	_, ns := newProcess(t, holdfast.Options{Shared: tr, Logger: quiet},
		holdfast.Policy{TTL: 10 * time.Minute, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{Disabled: true}})
	return levelProcess{tr, ns}
}

// liveReads returns the reads each node but lost answered since before, and
// their max over mean, over the nodes that answered any. A node's state at
// the end is not the test: under load a replica's readiness poll can time
// out and take it out for a moment, or, in one process's view, for the
// whole window.
func liveReads(before, after []NodeStats, lost string) (map[string]uint64, float64) {
	was := map[string]uint64{}
	for _, s := range before {
		was[s.Addr] = s.Reads
	}
	reads := map[string]uint64{}
	var sum, top float64
	for _, s := range after {
		if s.Addr == lost {
			continue
		}
		d := s.Reads - was[s.Addr]
		if d == 0 {
			continue
		}
		reads[s.Addr] = d
		sum += float64(d)
		top = max(top, float64(d))
	}
	if sum == 0 {
		return reads, 0
	}
	return reads, top / (sum / float64(len(reads)))
}

// TestLevelingSparesTheLoneNode: a 3 + 3 Cluster loses a replica
// (SIGKILL), so its primary serves its shard's reads alone, twice what each
// of the other four nodes serves (max over mean 1.67 over the five). A
// process with leveling off shows that; one with the default LevelAbove
// (1.1), reading the same keys beside it, answers the excess from its
// last-known-good copies and brings its own reads' max over mean near
// 1.1. Both read every key once first, so that their copies cover every
// key.
func TestLevelingSparesTheLoneNode(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 30 * time.Second})
	ctx := ctxT(t, 120*time.Second)
	on := newLevelProcess(t, cl.Addrs(), 0)
	off := newLevelProcess(t, cl.Addrs(), -1)

	const keys = 600
	load := holdfast.LoaderFunc(func(ctx context.Context, key string) ([]byte, error) {
		return []byte("value of " + key), nil
	})
	for i := range keys {
		for _, p := range []levelProcess{on, off} {
			if _, err := p.ns.Get(ctx, "k"+strconv.Itoa(i), load); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, on.tr, 6, 15*time.Second)
	waitReady(t, off.tr, 6, 15*time.Second)

	lost := cl.Replicas(ctx)[0]
	lost.Kill()

	// Each process reads random keys, 3 goroutines each, for 5 s or
	// 150,000 reads, whichever comes first; the node reads are compared
	// from 1.5 s in, once the lost node is out of both maps and leveling
	// has had a second to settle.
	const readFor, settleFor, maxReads = 5 * time.Second, 1500 * time.Millisecond, 150_000
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for _, p := range []levelProcess{on, off} {
		for g := range 3 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for n := 0; n < maxReads/6 && time.Since(start) < readFor; n++ {
					if _, err := p.ns.Get(ctx, "k"+strconv.Itoa(rng.IntN(keys)), load); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	time.Sleep(settleFor)
	onBefore, offBefore := on.tr.NodeStats(), off.tr.NodeStats()
	shedBefore := on.ns.Stats().MemoryForBusyNode
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if time.Since(start) < readFor-time.Second {
		t.Logf("the reads ended after %v, at %d reads", time.Since(start), maxReads)
	}
	onReads, onRatio := liveReads(onBefore, on.tr.NodeStats(), lost.Addr())
	offReads, offRatio := liveReads(offBefore, off.tr.NodeStats(), lost.Addr())
	shed := on.ns.Stats().MemoryForBusyNode - shedBefore
	t.Logf("max over mean of the live nodes' reads: leveling off %.2f %v; on %.2f %v, %d reads answered from memory",
		offRatio, offReads, onRatio, onReads, shed)
	if len(onReads) < 4 || len(offReads) < 4 {
		t.Fatalf("nodes that took reads: %d with leveling, %d without; want 5, the six less the lost one (4 when a replica was not ready all along)", len(onReads), len(offReads))
	}
	if offRatio < 1.45 {
		t.Fatalf("without leveling the lone primary's share is %.2f of the mean, want near 1.67: the test lost its premise", offRatio)
	}
	if onRatio > 1.35 {
		t.Fatalf("with leveling the busiest node read %.2f times the mean, want ≤ 1.35 (1.1 set; a replica whose readiness flaps under load leaves its primary busy for moments leveling does not follow)", onRatio)
	}
	if shed == 0 || off.ns.Stats().MemoryForBusyNode != 0 {
		t.Fatalf("MemoryForBusyNode %d with leveling, %d without; want > 0 and 0", shed, off.ns.Stats().MemoryForBusyNode)
	}
}

// Shed is false for a standalone server and with LevelAbove negative, and
// asks nothing of a Cluster whose nodes are even.
func TestShedOnlyWhereNodesAreUneven(t *testing.T) {
	redistest.Require(t)
	one := newTier(t, Options{Addrs: []string{redistest.Standalone(t).Addr()}})
	if one.Shed("product:1") {
		t.Fatal("a standalone server shed a read")
	}
	cl := redistest.Cluster(t)
	offTier := newTier(t, Options{Addrs: cl.Addrs(), Cluster: ClusterOptions{LevelAbove: -1}})
	if offTier.Shed("product:1") {
		t.Fatal("LevelAbove −1 shed a read")
	}
	if _, err := New(Options{Addrs: cl.Addrs(), Cluster: ClusterOptions{LevelAbove: 0.5}}); err == nil {
		t.Fatal("LevelAbove 0.5 accepted")
	}
	// Even nodes, idle: the shares stay 0 however often the loop runs.
	tr := newTier(t, Options{Addrs: cl.Addrs()})
	time.Sleep(3 * levelEvery)
	for i := range 1000 {
		if tr.Shed(fmt.Sprintf("product:%d", i)) {
			t.Fatalf("an idle, even Cluster shed product:%d", i)
		}
	}
}
