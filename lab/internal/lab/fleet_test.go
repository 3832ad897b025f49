package lab

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The layout puts every node on exactly one host, 2 primaries and 2
// replicas a host, and never a shard's two nodes on one host.
func TestFleetLayout(t *testing.T) {
	layout := fleetLayout(fleetShards, fleetHosts)
	if len(layout) != fleetHosts {
		t.Fatalf("%d hosts, want %d", len(layout), fleetHosts)
	}
	hostOf := map[int]int{}
	for h, nodes := range layout {
		primaries := 0
		for _, n := range nodes {
			if _, dup := hostOf[n]; dup {
				t.Fatalf("node %d on hosts %d and %d", n, hostOf[n], h)
			}
			hostOf[n] = h
			if n < fleetShards {
				primaries++
			}
		}
		if len(nodes) != 4 || primaries != 2 {
			t.Errorf("host %d holds %v: want 2 primaries and 2 replicas", h, nodes)
		}
	}
	if len(hostOf) != 2*fleetShards {
		t.Fatalf("%d nodes placed, want %d", len(hostOf), 2*fleetShards)
	}
	for s := range fleetShards {
		if hostOf[s] == hostOf[fleetShards+s] {
			t.Errorf("shard %d: primary and replica both on host %d", s, hostOf[s])
		}
	}
}

// The lost nodes: 12, 6 primaries and 6 replicas, of 3 whole hosts, and no
// shard loses both of its nodes.
func TestLostHosts(t *testing.T) {
	layout := fleetLayout(fleetShards, fleetHosts)
	lost := lostHosts(layout, fleetShards, fleetLostHosts)
	if len(lost) != 12 {
		t.Fatalf("lost %v: want 12 nodes", lost)
	}
	shards := map[int]bool{}
	primaries := 0
	for _, n := range lost {
		if shards[n%fleetShards] {
			t.Errorf("shard %d loses both nodes: %v", n%fleetShards, lost)
		}
		shards[n%fleetShards] = true
		if n < fleetShards {
			primaries++
		}
	}
	if primaries != 6 {
		t.Errorf("lost %v: %d primaries, want 6", lost, primaries)
	}
	hosts := 0
	for _, h := range layout {
		in := 0
		for _, n := range h {
			if slices.Contains(lost, n) {
				in++
			}
		}
		switch in {
		case 0:
		case len(h):
			hosts++
		default:
			t.Errorf("host %v partly lost", h)
		}
	}
	if hosts != fleetLostHosts {
		t.Errorf("%d hosts lost, want %d", hosts, fleetLostHosts)
	}
}

// A host that shares a shard with one already picked is skipped.
func TestLostHostsSkipsSharedShard(t *testing.T) {
	// 2 shards: nodes 0, 1 primaries, 2, 3 their replicas.
	layout := [][]int{{0, 3}, {1, 2}, {2}, {3}}
	got := lostHosts(layout, 2, 2)
	// Host 0 hits shards 0 and 1; every other host holds one of them.
	if !slices.Equal(got, []int{0, 3}) {
		t.Errorf("lost %v, want [0 3]", got)
	}
}

func TestMaxOverMean(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0, 0}, 0},
		{[]float64{5, 5, 5}, 1},
		{[]float64{1, 3}, 1.5},
	} {
		if got := maxOverMean(tc.v); got != tc.want {
			t.Errorf("maxOverMean(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// With 12 of 30 shards down to one node, that node takes its shard's
// whole reads where the 36 others take half: 1 / (30/48) = 1.6.
func TestLiveShareFloor(t *testing.T) {
	lost := lostHosts(fleetLayout(fleetShards, fleetHosts), fleetShards, fleetLostHosts)
	if got := liveShareFloor(fleetShards, lost); math.Abs(got-1.6) > 1e-9 {
		t.Errorf("floor %v, want 1.6", got)
	}
	if got := liveShareFloor(fleetShards, nil); got != 1 {
		t.Errorf("floor with nothing lost %v, want 1", got)
	}
}

func TestTookReads(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		samples []readSample
		want    time.Duration
		ok      bool
	}{
		{"no answer", nil, 0, false},
		// The first answer counts the commands queued during the freeze.
		{"first answer only", []readSample{{10 * ms, 500}}, 0, false},
		{"no new read", []readSample{{10 * ms, 500}, {40 * ms, 500}}, 0, false},
		{"reads again", []readSample{{10 * ms, 500}, {40 * ms, 500}, {70 * ms, 503}}, 70 * ms, true},
	} {
		got, ok := tookReads(tc.samples)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSpanOf(t *testing.T) {
	first, last, n := spanOf([]time.Duration{-1, 300, 100, -1, 200})
	if first != 100 || last != 300 || n != 3 {
		t.Errorf("spanOf = %v %v %d, want 100 300 3", first, last, n)
	}
	if _, _, n := spanOf([]time.Duration{-1}); n != 0 {
		t.Errorf("spanOf of nothing done: n = %d", n)
	}
}

func TestSlotRanges(t *testing.T) {
	r := slotRanges(30)
	if r[0][0] != 0 || r[29][1] != 16383 {
		t.Fatalf("ranges %v do not span 0..16383", r)
	}
	for i := 1; i < len(r); i++ {
		if r[i][0] != r[i-1][1]+1 {
			t.Fatalf("gap or overlap between %v and %v", r[i-1], r[i])
		}
		if size := r[i][1] - r[i][0] + 1; size != 546 && size != 547 {
			t.Errorf("range %v has %d slots", r[i], size)
		}
	}
}

// A Cluster that does not form says which node is behind, which nodes it
// lacks and what they log; a node that exited ends the wait at once.
func TestWaitKnownSaysWhy(t *testing.T) {
	c := &Cluster{Nodes: make([]*redistest.Process, 3)}
	buses := make([]int, 3)
	defer c.Close()
	for i := range c.Nodes {
		var err error
		if c.Nodes[i], buses[i], err = launchFleetNode(time.Second); err != nil {
			c.Nodes = c.Nodes[:i]
			t.Fatal(err)
		}
	}
	// Never met: each node knows only itself.
	err := c.waitKnown(context.Background(), buses, time.Second)
	if err == nil {
		t.Fatal("three nodes never met formed a Cluster")
	}
	for _, n := range c.Nodes[1:] {
		if want := "missing " + n.Addr() + " (knows 1 nodes; log: "; !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	c.Nodes[2].Kill()
	start := time.Now()
	err = c.waitKnown(context.Background(), buses, time.Minute)
	if err == nil || !strings.Contains(err.Error(), c.Nodes[2].Addr()+" exited while the Cluster formed") {
		t.Errorf("after a node was killed: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("waited %v for a node that had exited", d)
	}
}
