package main

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/holdfastprom"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

// What an operator sees of a shared-tier outage, on real processes: a
// Cache over redis.NewLazy, exported by holdfastprom, logging to a
// captured handler, while a reader reads through it. Each fault must show
// as a log line and in holdfast_shared_tier_up within faultSeen, and its
// end as a recovery line; a slow or failing database must show as neither.

// faultSeen is the bound of the acceptance test: 2 s from a fault to its
// line and its metric.
const faultSeen = 2 * time.Second

// records is a slog.Handler that keeps each record's message and
// attributes, as "msg k=v ...", with when it arrived.
type records struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	s := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines, r.at = append(r.lines, s), append(r.at, time.Now())
	return nil
}

// matching returns the lines containing every one of subs.
func (r *records) matching(subs ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
next:
	for _, l := range r.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// outageRig is one service: a Lazy tier over srv, a Cache over it
// exported to reg, logging to logs, and a reader.
type outageRig struct {
	logs *records
	reg  *prometheus.Registry
	ns   *holdfast.Namespace
}

// sharedReads is the rigs' policy: every read goes to the shared tier,
// which the hot tier would answer most of.
var sharedReads = holdfast.Policy{TTL: time.Minute, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{MaxBytes: -1}}

func newOutageRig(t *testing.T, addr string, load holdfast.Loader, p holdfast.Policy) *outageRig {
	t.Helper()
	r := &outageRig{logs: &records{}, reg: prometheus.NewRegistry()}
	log := slog.New(r.logs)
	l, err := redis.NewLazy(redis.Options{Addrs: []string{addr}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	c, err := holdfast.New(holdfast.Options{Shared: l, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := holdfastprom.Register(r.reg, c); err != nil {
		t.Fatal(err)
	}
	r.ns, err = c.Namespace("product", p)
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = r.ns.Get(ctx, []string{"1", "2", "3"}[i%3], load)
			cancel()
		}
	}()
	t.Cleanup(func() { close(stop); <-done }) // before the Cache closes
	return r
}

// gauge returns the value of the series name{label=value} (no label when
// label is ""), and false when reg does not export it.
func (r *outageRig) gauge(t *testing.T, name, label, value string) (float64, bool) {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if match {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// waitSeen waits up to d for a line with every one of subs and for
// holdfast_shared_tier_up to be up, and fails the test if either is
// missing then; it returns how long the line took.
func (r *outageRig) waitSeen(t *testing.T, d time.Duration, up float64, subs ...string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		lines := r.logs.matching(subs...)
		v, ok := r.gauge(t, "holdfast_shared_tier_up", "", "")
		if len(lines) > 0 && ok && v == up {
			took := time.Since(start)
			t.Logf("after %v: %s", took.Round(time.Millisecond), lines[0])
			return took
		}
		if time.Since(start) > d {
			t.Fatalf("not within %v: a line with %q (have %q) and holdfast_shared_tier_up %v (have %v, %v)", d, subs, r.logs.matching("holdfast"), up, v, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *outageRig) breakerOpen(t *testing.T) {
	t.Helper()
	if v, ok := r.gauge(t, "holdfast_redis_breaker_state", "state", "closed"); !ok || v != 0 {
		t.Errorf("holdfast_redis_breaker_state{state=closed} = %v (exported %v) while down, want 0", v, ok)
	}
}

var loadOK = func(context.Context, string) ([]byte, error) { return []byte("v"), nil }

func TestOutageRedisMissingAtStart(t *testing.T) {
	srv := redistest.Standalone(t)
	srv.Kill()
	r := newOutageRig(t, srv.Addr(), loadOK, sharedReads)
	r.waitSeen(t, faultSeen, 0, "shared tier down", "reason=unreachable")
	r.breakerOpen(t)
	if v, ok := r.gauge(t, "holdfast_shared_tier_down", "reason", "unreachable"); !ok || v != 1 {
		t.Errorf("holdfast_shared_tier_down{reason=unreachable} = %v (exported %v), want 1", v, ok)
	}
	if caps := r.logs.matching("capabilities="); len(caps) != 0 {
		t.Errorf("capabilities logged before connecting: %q", caps)
	}
	srv.Restart()
	// Lazy retries at most 10 s apart.
	r.waitSeen(t, 30*time.Second, 1, "shared tier recovered", "down_for=")
	caps := r.logs.matching("capabilities=")
	if len(caps) != 1 || !strings.Contains(caps[0], "versions=true") || !strings.Contains(caps[0], "smearing=false") {
		t.Errorf("capability lines once connected to a standalone server: %q", caps)
	}
}

// SIGKILL is unreachable, SIGSTOP a timeout; each ends with the server back.
func TestOutageRedisFaults(t *testing.T) {
	for _, f := range []struct {
		name        string
		fault, heal func(*redistest.Server)
		reason      string
	}{
		{"SIGKILL", (*redistest.Server).Kill, (*redistest.Server).Restart, "unreachable"},
		{"SIGSTOP", (*redistest.Server).Freeze, (*redistest.Server).Thaw, "timeout"},
	} {
		t.Run(f.name, func(t *testing.T) {
			srv := redistest.Standalone(t)
			r := newOutageRig(t, srv.Addr(), loadOK, sharedReads)
			r.waitSeen(t, 20*time.Second, 1, "capabilities=")
			f.fault(srv)
			r.waitSeen(t, faultSeen, 0, "shared tier down", "reason="+f.reason)
			r.breakerOpen(t)
			f.heal(srv)
			// The breaker's open interval doubles while its probes fail.
			r.waitSeen(t, 45*time.Second, 1, "shared tier recovered", "down_for=")
		})
	}
}

// A database that is slow, then failing, is no outage of the shared tier:
// no line says so and the breaker stays closed.
func TestSlowDatabaseIsNoTierOutage(t *testing.T) {
	srv := redistest.Standalone(t)
	var mu sync.Mutex
	mode := "ok"
	load := func(ctx context.Context, key string) ([]byte, error) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "slow":
			select {
			case <-time.After(300 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "down":
			return nil, errors.New("database down")
		}
		return []byte("v"), nil
	}
	r := newOutageRig(t, srv.Addr(), load, sharedReads)
	r.waitSeen(t, 20*time.Second, 1, "capabilities=")
	for _, m := range []string{"slow", "down"} {
		mu.Lock()
		mode = m
		mu.Unlock()
		// Reads that miss reach the database: new keys through Invalidate.
		for i := range 15 {
			_ = r.ns.Invalidate(context.Background(), []string{"1", "2", "3"}[i%3])
			time.Sleep(200 * time.Millisecond)
		}
	}
	if lines := r.logs.matching("shared tier down"); len(lines) != 0 {
		t.Errorf("a database fault logged as a tier outage: %q", lines)
	}
	if v, ok := r.gauge(t, "holdfast_redis_breaker_state", "state", "closed"); !ok || v != 1 {
		t.Errorf("holdfast_redis_breaker_state{state=closed} = %v (exported %v) with the database faulty, want 1", v, ok)
	}
	if st := r.ns.Stats(); st.Get("load.errors") == 0 {
		t.Errorf("the database's faults never reached a load: %+v", st)
	}
}

// Two instances over one Redis, as two pods of a service: an update
// invalidated on one is served by the other, which held the key in its hot
// tier, within the stream's bound; then one instance's path to Redis is
// cut (its connections reset, new ones refused, the server and the other
// instance untouched). That instance, and only it, logs the outage and
// exports it within faultSeen; an update made on the other meanwhile is
// served by it once its path is back, with a recovery line.
func TestOutageTwoInstances(t *testing.T) {
	srv := redistest.Standalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	var mu sync.Mutex
	versions := map[string]int{}
	load := holdfast.Loader(func(_ context.Context, key string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		return []byte("v" + strconv.Itoa(versions[key])), nil
	})
	update := func(key string) string {
		mu.Lock()
		defer mu.Unlock()
		versions[key]++
		return "v" + strconv.Itoa(versions[key])
	}
	// Key 1 in the hot tier, where only the stream can reach it; the
	// rig's other keys read from Redis, so each instance's breaker sees
	// its path.
	p := holdfast.Policy{TTL: time.Minute, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{Threshold: -1, Admit: func(k string) bool { return k == "1" }}}
	a := newOutageRig(t, proxy.Addr(), load, p)
	b := newOutageRig(t, srv.Addr(), load, p)
	for _, r := range []*outageRig{a, b} {
		r.waitSeen(t, 20*time.Second, 1, "capabilities=")
	}
	serves := func(r *outageRig, want string, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			res, err := r.ns.Get(context.Background(), "1", load)
			if err == nil && string(res.Value) == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("key 1 not served as %s within %v: %q from %v, %v", want, within, res.Value, res.Source, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, r := range []*outageRig{a, b} {
		serves(r, "v0", time.Second)
		eventually(t, 5*time.Second, "key 1 hot", func() bool {
			res, _ := r.ns.Get(context.Background(), "1", load)
			return res.Source == holdfast.SourceHot
		})
	}

	want := update("1")
	if err := a.ns.Invalidate(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("an update invalidated on A served by B after %v", serves(b, want, faultSeen).Round(time.Microsecond))

	proxy.Cut()
	a.waitSeen(t, faultSeen, 0, "shared tier down", "reason=unreachable")
	a.breakerOpen(t)
	if v, ok := a.gauge(t, "holdfast_shared_tier_down", "reason", "unreachable"); !ok || v != 1 {
		t.Errorf("A's holdfast_shared_tier_down{reason=unreachable} = %v (exported %v), want 1", v, ok)
	}
	want = update("1")
	if err := b.ns.Invalidate(context.Background(), "1"); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Heal(); err != nil {
		t.Fatal(err)
	}
	// Its breaker's open interval doubles while its probes fail, and the
	// stream's return cuts it short.
	a.waitSeen(t, 45*time.Second, 1, "shared tier recovered", "down_for=")
	t.Logf("the update invalidated on B while A was cut off served by A %v after its recovery line", serves(a, want, faultSeen).Round(time.Millisecond))
	if lines := b.logs.matching("shared tier down"); len(lines) != 0 {
		t.Errorf("B, whose path to Redis was never cut, logged %q", lines)
	}
	if v, ok := b.gauge(t, "holdfast_shared_tier_up", "", ""); !ok || v != 1 {
		t.Errorf("B's holdfast_shared_tier_up = %v (exported %v), want 1", v, ok)
	}
	if v, ok := b.gauge(t, "holdfast_redis_breaker_state", "state", "closed"); !ok || v != 1 {
		t.Errorf("B's holdfast_redis_breaker_state{state=closed} = %v (exported %v), want 1", v, ok)
	}
}

// eventually polls cond every millisecond for up to d, and fails the test
// naming what if it never holds.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) {
		if time.Since(start) > d {
			t.Fatalf("not within %v: %s", d, what)
		}
	}
}
