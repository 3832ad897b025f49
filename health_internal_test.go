package holdfast

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// An outage is logged when first seen and its end with how long it
// lasted; a tier flapping within outageLogEvery logs one down line a
// period, and the next counts the outages left out.
func TestOutageLogRateLimited(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	up := tier.Health{Connected: true}
	down := tier.Health{Connected: true, Down: true, Reason: tier.ReasonTimeout}
	var l outageLog
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	if _, ok := l.observe(up, at(0)); ok {
		t.Fatal("a line for a tier that is up")
	}
	ln, ok := l.observe(down, at(time.Second))
	if !ok || !ln.down || ln.reason != tier.ReasonTimeout || !ln.since.Equal(at(time.Second)) || ln.unlogged != 0 {
		t.Fatalf("first outage: %+v, %v", ln, ok)
	}
	if _, ok := l.observe(down, at(2*time.Second)); ok {
		t.Fatal("a second line for the same outage")
	}
	ln, ok = l.observe(up, at(4*time.Second))
	if !ok || ln.down || ln.outFor != 3*time.Second {
		t.Fatalf("recovery: %+v, %v", ln, ok)
	}
	// Flapping: three more outages within the period are not logged...
	for i := range 3 {
		base := 5*time.Second + time.Duration(i)*2*time.Second
		if ln, ok := l.observe(down, at(base)); ok {
			t.Fatalf("flap %d logged: %+v", i, ln)
		}
		if ln, ok := l.observe(up, at(base+time.Second)); ok {
			t.Fatalf("recovery of flap %d logged: %+v", i, ln)
		}
	}
	// ...and one still on when the period ends is, counting those before it.
	if _, ok := l.observe(down, at(20*time.Second)); ok {
		t.Fatal("logged within the period")
	}
	ln, ok = l.observe(down, at(31*time.Second))
	if !ok || !ln.down || ln.unlogged != 3 || !ln.since.Equal(at(20*time.Second)) {
		t.Fatalf("outage after the period: %+v, %v", ln, ok)
	}
	ln, ok = l.observe(up, at(32*time.Second))
	if !ok || ln.outFor != 12*time.Second {
		t.Fatalf("its recovery: %+v, %v", ln, ok)
	}
}
