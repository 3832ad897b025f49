package redis

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// faultWithin is how soon after a fault the tier must report it: the
// Cache's outage line is due within 2 s, and it asks four times a second.
const faultWithin = 1500 * time.Millisecond

// readEvery reads key from hr every 10 ms until the test ends, as a
// service's traffic would: a breaker learns of a fault from calls.
func readEvery(t *testing.T, tr tier.Tier) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _, _ = tr.Get(ctx, "k")
			cancel()
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// waitHealth waits up to d for hr's health to satisfy ok and returns it,
// with how long it took; the test fails if it never does.
func waitHealth(t *testing.T, hr tier.HealthReporter, d time.Duration, what string, ok func(tier.Health) bool) tier.Health {
	t.Helper()
	start := time.Now()
	for {
		h := hr.Health()
		if ok(h) {
			t.Logf("%s after %v: %+v", what, time.Since(start).Round(time.Millisecond), h)
			return h
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v; health %+v", what, d, h)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func isDown(h tier.Health) bool { return h.Down }
func isUp(h tier.Health) bool   { return h.Connected && !h.Down }

// A killed server is reported down as unreachable, and up once it is back.
func TestHealthServerKilled(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Logger: quiet})
	if h := tr.Health(); !isUp(h) || h.Breaker.State != "closed" || h.Nodes != nil {
		t.Fatalf("health of a healthy standalone tier: %+v", h)
	}
	readEvery(t, tr)
	srv.Kill()
	h := waitHealth(t, tr, faultWithin, "down after SIGKILL", isDown)
	if h.Reason != tier.ReasonUnreachable || h.Breaker.State == "closed" {
		t.Errorf("after SIGKILL: %+v, want down, unreachable, breaker not closed", h)
	}
	srv.Restart()
	// The breaker's open interval doubles while probes fail, up to 30 s;
	// the server is back within a few of them.
	waitHealth(t, tr, 45*time.Second, "up after restart", isUp)
}

// A frozen server is reported down as a timeout, and up once it thaws.
func TestHealthServerFrozen(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Logger: quiet})
	readEvery(t, tr)
	srv.Freeze()
	h := waitHealth(t, tr, faultWithin, "down after SIGSTOP", isDown)
	if h.Reason != tier.ReasonTimeout {
		t.Errorf("after SIGSTOP: reason %q, want %q", h.Reason, tier.ReasonTimeout)
	}
	srv.Thaw()
	waitHealth(t, tr, 45*time.Second, "up after SIGCONT", isUp)
}

// A Lazy tier whose server is missing at start is down, as unreachable,
// with its breaker open, until it connects.
func TestHealthLazyServerMissing(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	l, err := NewLazy(Options{Addrs: []string{srv.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := waitHealth(t, l, faultWithin, "down while the server is missing", isDown)
	if h.Connected || h.Reason != tier.ReasonUnreachable || h.Breaker.State != "open" {
		t.Errorf("server missing: %+v, want not connected, unreachable, breaker open", h)
	}
	srv.Restart()
	// Lazy retries at most 10 s apart.
	waitHealth(t, l, 30*time.Second, "up once connected", isUp)
}

// Credentials the server refuses are reported as such.
func TestHealthAuthRefused(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{Access: redistest.Access{Password: "right"}})
	l, err := NewLazy(Options{Addrs: []string{srv.Addr()}, Password: "wrong", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := waitHealth(t, l, faultWithin, "down with the password refused", isDown)
	if h.Reason != tier.ReasonAuthRefused {
		t.Errorf("password refused: reason %q, want %q", h.Reason, tier.ReasonAuthRefused)
	}
}
