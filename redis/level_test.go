package redis

import (
	"context"
	"fmt"
	"math"
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
		holdfast.Policy{TTL: 10 * time.Minute, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{MaxBytes: -1}})
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
	load := func(ctx context.Context, key string) ([]byte, error) {
		return []byte("value of " + key), nil
	}
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
	shedBefore := on.ns.Stats().Get("memory_for_busy_node")
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
	shed := on.ns.Stats().Get("memory_for_busy_node") - shedBefore
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
	if shed == 0 || off.ns.Stats().Get("memory_for_busy_node") != 0 {
		t.Fatalf("MemoryForBusyNode %d with leveling, %d without; want > 0 and 0", shed, off.ns.Stats().Get("memory_for_busy_node"))
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

// levelSim drives nodeSet.level on a made-up slot map, without servers:
// reads arrive at random (Poisson), the Cache could answer every one from
// memory and asks Shed, and those not shed go to a live node of the
// key's shard picked at random, as routing.go sends them.
type levelSim struct {
	s      *nodeSet
	shards [][]*node
	rng    *rand.Rand
	rate   float64 // reads a second per shard
}

func newLevelSim(shards, nodesPerShard int, rate float64) *levelSim {
	sim := &levelSim{s: &nodeSet{o: ClusterOptions{LevelAbove: DefaultLevelAbove}}, rng: rand.New(rand.NewPCG(1, 2)), rate: rate}
	tp := &topology{}
	for i := range shards {
		var sh shard
		for j := range nodesPerShard {
			n := &node{addr: fmt.Sprintf("127.0.0.1:%d", 7000+10*i+j)}
			n.ready.Store(true)
			sh.nodes = append(sh.nodes, n)
			tp.nodes = append(tp.nodes, n)
		}
		sim.shards = append(sim.shards, sh.nodes)
		tp.shards = append(tp.shards, sh)
	}
	sim.s.topo.Store(tp)
	return sim
}

// poisson draws a count of mean m (Knuth's method; m is small here).
func (sim *levelSim) poisson(m float64) int {
	limit, k, p := math.Exp(-m), 0, 1.0
	for {
		p *= sim.rng.Float64()
		if p <= limit {
			return k
		}
		k++
	}
}

// step is one levelEvery of reads, then a leveling round; it returns each
// node's reads in the interval.
func (sim *levelSim) step() map[*node]int {
	got := map[*node]int{}
	for _, sh := range sim.shards {
		p := sh[0]
		var live []*node
		for _, n := range sh {
			if !n.ejected.Load() {
				live = append(live, n)
			}
		}
		share := uint32(p.shedShare.Load())
		for range sim.poisson(sim.rate * levelEvery.Seconds()) {
			p.levelAsked.add(1)
			if share > 0 && sim.rng.Uint32N(shedOne) < share {
				p.levelShed.add(1)
				continue
			}
			n := live[sim.rng.IntN(len(live))]
			n.reads.add(1)
			got[n]++
		}
	}
	sim.s.level(levelEvery)
	return got
}

// run runs rounds steps and returns each shard's mean shed share over
// the last half of them, and each node's reads over the last half.
func (sim *levelSim) run(rounds int) (share []float64, reads map[*node]int) {
	share = make([]float64, len(sim.shards))
	reads = map[*node]int{}
	for r := range rounds {
		got := sim.step()
		if r < rounds/2 {
			continue
		}
		for i, sh := range sim.shards {
			share[i] += float64(sh[0].shedShare.Load()) / shedOne / float64(rounds-rounds/2)
		}
		for n, c := range got {
			reads[n] += c
		}
	}
	return share, reads
}

// An evenly loaded Cluster sheds next to nothing: the busiest node of each
// shard reads above the mean by chance, and that is not load to level.
// Taken as load, it drove every shard's share past 0.7 at this rate.
func TestLevelEvenClusterShedsLittle(t *testing.T) {
	for _, rate := range []float64{50, 200, 2000} { // per shard: 25, 100, 1,000 per node
		sim := newLevelSim(3, 2, rate)
		share, _ := sim.run(2400) // 10 simulated minutes
		for i, sh := range share {
			if sh > 0.05 {
				t.Errorf("%v reads/s per shard: shard %d shed %.3f of its reads on average, want <= 0.05 (all %.3f)", rate, i, sh, share)
			}
		}
	}
}

// A shard down to one node is levelled to near LevelAbove times the mean.
func TestLevelLoneNodeShed(t *testing.T) {
	for _, rate := range []float64{50, 200, 2000} {
		sim := newLevelSim(4, 2, rate)
		sim.shards[0][1].ejected.Store(true)
		share, reads := sim.run(2400)
		var sum, top float64
		for _, c := range reads {
			sum += float64(c)
			top = max(top, float64(c))
		}
		ratio := top / (sum / 7) // 7 live nodes
		t.Logf("%v reads/s per shard: shares %.3f, busiest node %.2f times the mean", rate, share, ratio)
		if share[0] < 0.2 || ratio > 1.25 {
			t.Errorf("%v reads/s per shard: the lone node's shard shed %.3f, busiest node %.2f times the mean; want > 0.2 and <= 1.25", rate, share[0], ratio)
		}
	}
}
