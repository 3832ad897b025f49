package redis

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

func testEjector(t *testing.T) ejector {
	t.Helper()
	c, err := ClusterOptions{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newEjector(c)
}

// TestEjectorConsecutive: 3 failures in a row eject; a success in between
// starts the run again; outcomes that arrive while ejected are ignored.
func TestEjectorConsecutive(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	e := testEjector(t)
	for i, f := range []bool{true, true, false, true, true} {
		if e.record(clk.Now(), f) {
			t.Fatalf("outcome %d ejected early", i)
		}
		clk.Advance(time.Millisecond)
	}
	if !e.record(clk.Now(), true) {
		t.Fatal("third failure in a row did not eject")
	}
	e.eject(clk.Now(), 0)
	if e.record(clk.Now(), true) || e.record(clk.Now(), false) || !e.ejected {
		t.Fatal("late outcomes changed an ejected node")
	}
}

// TestEjectorRate: failures that never reach 3 in a row still eject once
// half of at least MinRequests requests in the window failed; old failures
// slide out of the window.
func TestEjectorRate(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	e := testEjector(t)
	// 9 of 18 failed, alternating: below MinRequests (20).
	for i := 0; i < 18; i++ {
		if e.record(clk.Now(), i%2 == 0) {
			t.Fatalf("ejected at request %d", i)
		}
		clk.Advance(10 * time.Millisecond)
	}
	// Let them all age out: a fresh window needs its own 20.
	clk.Advance(DefaultNodeWindow)
	for i := 0; i < 19; i++ {
		if e.record(clk.Now(), i%2 == 0) {
			t.Fatalf("ejected at request %d of a fresh window", i)
		}
	}
	if !e.record(clk.Now(), false) && !e.record(clk.Now(), true) {
		t.Fatal("11 of 21 failed and not ejected")
	}
}

// TestEjectorBackoff: probes are due after a jittered 250 ms that doubles
// per failed probe up to 1 s; a good probe brings the node back with a
// clean slate.
func TestEjectorBackoff(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	e := testEjector(t)
	e.eject(clk.Now(), 0.999) // jitter near 1: the wait is near its full value
	if e.probeDue(clk.Now()) {
		t.Fatal("probe due at once")
	}
	want := DefaultProbeInterval
	var waits []time.Duration
	for i := 0; i < 8; i++ {
		// Due somewhere in [want/2, want).
		clk.Advance(want/2 - time.Millisecond)
		if e.probeDue(clk.Now()) {
			t.Fatalf("probe %d due before half its wait %v", i, want)
		}
		waited := want/2 - time.Millisecond
		for !e.probeDue(clk.Now()) {
			clk.Advance(time.Millisecond)
			waited += time.Millisecond
		}
		if waited > want {
			t.Fatalf("probe %d due after %v, wait %v", i, waited, want)
		}
		waits = append(waits, waited)
		if e.probed(clk.Now(), false, 0.999) {
			t.Fatal("failed probe brought the node back")
		}
		want = min(2*want, DefaultMaxProbeInterval)
	}
	t.Logf("probe waits: %v", waits)
	if waits[len(waits)-1] < DefaultMaxProbeInterval-10*time.Millisecond {
		t.Fatalf("backoff did not reach its cap: %v", waits)
	}
	for !e.probeDue(clk.Now()) {
		clk.Advance(10 * time.Millisecond)
	}
	if !e.probed(clk.Now(), true, 0) || e.ejected || e.ejections != 1 {
		t.Fatalf("good probe: %+v", e)
	}
	// Clean slate: two failures do not eject, the third does; the next
	// ejection starts the backoff from 250 ms again.
	first, second := e.record(clk.Now(), true), e.record(clk.Now(), true)
	if third := e.record(clk.Now(), true); first || second || !third {
		t.Fatal("run not restarted after coming back")
	}
	e.eject(clk.Now(), 0)
	clk.Advance(DefaultProbeInterval / 2)
	if !e.probeDue(clk.Now()) {
		t.Fatal("backoff not reset")
	}
}

// TestJitterSpreads: different draws spread the probe times over [d/2, d).
func TestJitterSpreads(t *testing.T) {
	d := time.Second
	if jittered(d, 0) != d/2 || jittered(d, 0.5) != 750*time.Millisecond || jittered(d, 0.999) >= d {
		t.Fatal(jittered(d, 0), jittered(d, 0.5), jittered(d, 0.999))
	}
}

// TestEjectionCap: past MaxEjectedShare of the nodes, a node that wants out
// stays in (fail-open), and its failures count for the tier's breaker.
func TestEjectionCap(t *testing.T) {
	c, _ := ClusterOptions{}.withDefaults()
	s := &nodeSet{o: c, clock: time.Now}
	tp := &topology{}
	for i := 0; i < 6; i++ {
		tp.nodes = append(tp.nodes, &node{addr: string(rune('a' + i)), ej: newEjector(c), conns: map[*watchedConn]struct{}{}})
	}
	s.topo.Store(tp)
	ejected := 0
	for _, n := range tp.nodes {
		for i := 0; i < DefaultNodeConsecutiveFailures; i++ {
			s.report(n, true, true)
		}
		if n.ejected.Load() {
			ejected++
		}
	}
	if ejected != 3 || s.ejected.Load() != 3 {
		t.Fatalf("ejected %d (count %d), want 3 of 6", ejected, s.ejected.Load())
	}
	last := tp.nodes[5]
	if last.ejected.Load() || !s.report(last, true, true) {
		t.Fatal("a node past the cap must stay in and count for the tier")
	}
	if s.report(last, false, false) {
		t.Fatal("a success counted as a tier failure")
	}
}

func TestClusterOptionsValidate(t *testing.T) {
	for _, c := range []ClusterOptions{
		{FailureRate: 2},
		{MaxEjectedShare: -0.1},
		{ConsecutiveFailures: -1},
		{ProbeInterval: time.Second, MaxProbeInterval: 500 * time.Millisecond},
		{Window: 5},
		{MaxReplicaLag: -1},
	} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c, err := ClusterOptions{ProbeInterval: 20 * time.Second}.withDefaults()
	if err != nil || c.MaxProbeInterval != 20*time.Second {
		t.Fatalf("MaxProbeInterval below a long ProbeInterval: %v, %v", c.MaxProbeInterval, err)
	}
	c, _ = ClusterOptions{}.withDefaults()
	if c.ConsecutiveFailures != 3 || c.ProbeInterval != 250*time.Millisecond || c.MaxProbeInterval != time.Second ||
		c.SilentConnTimeout != time.Second || c.ReadinessInterval != time.Second || c.MaxEjectedShare != 0.5 {
		t.Fatalf("defaults: %+v", c)
	}
	if _, err := New(Options{Addrs: []string{"127.0.0.1:1"}, Cluster: ClusterOptions{FailureRate: 2}}); err == nil {
		t.Fatal("New accepted a bad Cluster option")
	}
}
