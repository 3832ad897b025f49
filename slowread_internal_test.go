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
