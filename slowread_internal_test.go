package holdfast

import (
	"testing"
	"time"
)

// The slow-read delay follows the shared tier's recent latency: the floor
// while the tier answers fast, four times its latency once it answers
// slowly, and back down as it speeds up again. Failures say nothing of it.
func TestSlowReadDelayFollowsLatency(t *testing.T) {
	n := &Namespace{c: &Cache{}, p: Policy{SlowReadGrace: 2 * time.Millisecond}}
	if d := n.slowReadDelay(); d != 2*time.Millisecond {
		t.Fatalf("before any read: %v, want the 2 ms floor", d)
	}
	for range 100 {
		n.c.shared.observeRead(int64(200 * time.Microsecond))
	}
	if d := n.slowReadDelay(); d != 2*time.Millisecond {
		t.Fatalf("at 200 µs reads: %v, want the 2 ms floor", d)
	}
	for range 100 {
		n.c.shared.observeRead(int64(10 * time.Millisecond))
	}
	if d := n.slowReadDelay(); d < 39*time.Millisecond || d > 40*time.Millisecond {
		t.Fatalf("at 10 ms reads: %v, want about 40 ms", d)
	}
	// One outlier moves the average by an eighth of its excess.
	n.c.shared.observeRead(int64(90 * time.Millisecond))
	if d := n.slowReadDelay(); d > 81*time.Millisecond {
		t.Fatalf("after one 90 ms read: %v, want at most 4 × (10 + 80/8) ms", d)
	}
	for range 100 {
		n.c.shared.observeRead(int64(200 * time.Microsecond))
	}
	if d := n.slowReadDelay(); d != 2*time.Millisecond {
		t.Fatalf("back at 200 µs reads: %v, want the 2 ms floor", d)
	}
	n.c.shared.observeRead(0) // a fake clock that did not move
	if d := n.slowReadDelay(); d != 2*time.Millisecond {
		t.Fatalf("after a zero reading: %v", d)
	}
}

// The tier counts as failing for tierFailingFor after its last failure.
func TestSharedHealthFailing(t *testing.T) {
	var h sharedHealth
	if h.failing(int64(time.Hour)) {
		t.Fatal("failing before any failure")
	}
	h.failedAt.Store(int64(time.Hour))
	if !h.failing(int64(time.Hour + tierFailingFor - 1)) {
		t.Fatal("not failing just after a failure")
	}
	if h.failing(int64(time.Hour + tierFailingFor)) {
		t.Fatal("still failing tierFailingFor after the failure")
	}
}

// The tier is suspect, and reads leave their readers' goroutines, once
// reads have waited on it for the delay with none answered, and while it
// fails; not while it is idle, nor while it answers.
func TestSharedHealthSuspect(t *testing.T) {
	const ms = int64(time.Millisecond)
	delay := 2 * time.Millisecond
	var h sharedHealth
	if h.suspect(100*ms, delay) {
		t.Fatal("suspect while idle")
	}
	h.readBegins(100 * ms)
	if h.suspect(101*ms, delay) {
		t.Fatal("suspect 1 ms into a read")
	}
	if !h.suspect(103*ms, delay) {
		t.Fatal("not suspect 3 ms into a read, nothing answered")
	}
	h.readBegins(103 * ms)
	h.readEnds(100*ms, 104*ms, true)
	if h.suspect(105*ms, delay) {
		t.Fatal("suspect 1 ms after an answer")
	}
	h.readEnds(103*ms, 105*ms, false)
	if h.suspect(500*ms, delay) {
		t.Fatal("suspect while idle again")
	}
	h.failedAt.Store(500 * ms)
	if !h.suspect(600*ms, delay) {
		t.Fatal("not suspect 100 ms after a failure")
	}
}
