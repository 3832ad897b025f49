package holdfast_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/tier"
)

// The write-back from memory (refill.go) on the in-memory tier with a fake
// clock; the same on a real redis-server restarted empty is in package
// redis (refill_test.go there).

// refillPolicy keeps values well past the few seconds the tests move the
// clock, and no hot tier, so that every read past the first reaches the
// shared tier. The slow-read delay is off: the readers wait for the
// write-back's verdict, which is what the tests check (a slow write-back
// has a test of its own).
var refillPolicy = holdfast.Policy{TTL: time.Minute, SoftTTL: 30 * time.Second, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}, SlowReadGrace: -1}

// refillWorld is one in-memory tier under a fake clock, processes over it
// (each a Cache that hears the tier's stream, and its namespace) and a
// versioned source.
type refillWorld struct {
	clk    *fakeclock.Clock
	shared *inmem.Tier
	src    *source
	ps     []refillProc
}

type refillProc struct {
	c  *holdfast.Cache
	ns *holdfast.Namespace
}

// newRefillWorld starts procs processes; wrap, when set, wraps the first
// one's tier (a hook). The clock is a second past the stream's first
// Heard.
func newRefillWorld(t *testing.T, procs int, wrap func(*inmem.Tier) tier.Tier) *refillWorld {
	t.Helper()
	w := &refillWorld{clk: fakeclock.New(t0), src: &source{}}
	w.shared = inmem.New(w.clk.Now)
	for i := range procs {
		var shared tier.Tier = w.shared
		if i == 0 && wrap != nil {
			shared = wrap(w.shared)
		}
		c := newCache(t, holdfast.Options{Shared: shared, Clock: w.clk})
		eventually(t, "the stream to be heard", c.StreamHeard)
		w.ps = append(w.ps, refillProc{c, newNS(t, c, "product", refillPolicy)})
	}
	w.clk.Advance(time.Second)
	return w
}

func (w *refillWorld) get(t *testing.T, p int, key string) holdfast.Result {
	t.Helper()
	return mustGet(t, w.ps[p].ns, key, w.src.Load)
}

func (w *refillWorld) stat(p int, name string) uint64 { return w.ps[p].ns.Stats().Get(name) }

// readFrom reads key in process p and fails the test unless the answer
// came from src and the process has made refills write-backs and loads
// loads in all.
func (w *refillWorld) readFrom(t *testing.T, p int, key string, src holdfast.Source, refills, loads uint64) {
	t.Helper()
	res := w.get(t, p, key)
	if res.Source != src || w.stat(p, "refills") != refills || w.stat(p, "loads") != loads {
		t.Fatalf("%s from %v (%v), refills %d, loads %d; want from %v, %d and %d", key, res.Source, res.Reason, w.stat(p, "refills"), w.stat(p, "loads"), src, refills, loads)
	}
}

// heartbeat stands for the stream's heartbeat coming back a second later:
// a Heard at the clock's time, which vouches for every copy found current
// before it.
func (w *refillWorld) heartbeat(t *testing.T) {
	t.Helper()
	w.clk.Advance(time.Second)
	w.shared.Hear()
	for _, p := range w.ps {
		eventually(t, "the heartbeat to be heard", func() bool { return p.c.StreamHeard() && testhook.StreamHeardAt(p.c).Equal(w.clk.Now()) })
	}
}

// lose is the stream lost a second later, as when the tier dies.
func (w *refillWorld) lose(t *testing.T) {
	t.Helper()
	w.clk.Advance(time.Second)
	w.shared.Deafen()
	for _, p := range w.ps {
		eventually(t, "the stream to be lost", func() bool { return !p.c.StreamHeard() })
	}
}

// restartEmpty is the outage: the stream lost, the tier failing (during
// runs then), then back empty (no value, no version) and heard again.
func (w *refillWorld) restartEmpty(t *testing.T, during func()) {
	t.Helper()
	w.lose(t)
	w.shared.Fail(inmem.ErrInjected)
	if during != nil {
		during()
	}
	w.shared.Restart()
	w.shared.Fail(nil)
	w.heartbeat(t)
}

// holds fails the test unless the tier holds want for key, or, with
// orNothing, nothing.
func (w *refillWorld) holds(t *testing.T, key, want string, orNothing bool) {
	t.Helper()
	v, ok := w.shared.Raw("product:" + key)
	if (!ok && !orNothing) || ok && string(decodeValue(t, v)) != want {
		t.Fatalf("the tier holds %q (found %v) for %s, want %q", decodeValue(t, v), ok, key, want)
	}
}

func keyN(i int) string { return fmt.Sprint("k", i) }

// After the tier restarts empty, keys held current in memory are written
// back instead of loaded, once each across processes, and read back from
// the tier by every process.
func TestRefillAfterRestartFromMemory(t *testing.T) {
	w := newRefillWorld(t, 2, nil)
	const keys = 20
	want := make(map[string]string)
	for i := range keys {
		k := keyN(i)
		want[k] = string(w.get(t, 0, k).Value)
		if res := w.get(t, 1, k); res.Source != holdfast.SourceShared {
			t.Fatalf("b's first read of %s from %v, want shared", k, res.Source)
		}
	}
	loaded := w.stat(0, "loads") + w.stat(1, "loads")
	w.heartbeat(t)
	w.restartEmpty(t, nil)

	for i := range keys {
		k := keyN(i)
		for p := range w.ps {
			if res := w.get(t, p, k); string(res.Value) != want[k] || res.Stale() {
				t.Fatalf("%s after the restart: %q (stale %v), want %q fresh", k, res.Value, res.Stale(), want[k])
			}
		}
		w.holds(t, k, want[k], false)
	}
	if l := w.stat(0, "loads") + w.stat(1, "loads"); l != loaded {
		t.Errorf("%d loads after the restart, want 0", l-loaded)
	}
	if r := w.stat(0, "refills") + w.stat(1, "refills"); r != keys {
		t.Errorf("%d write-backs for %d keys, want one each", r, keys)
	}
	if c := w.shared.Calls().Refills; c != keys {
		t.Errorf("%d write-backs sent for %d keys: the second process should read the first one's", c, keys)
	}
}

// GetMany writes back the keys of a batch it holds current and loads only
// the others, in one loader call.
func TestRefillGetMany(t *testing.T) {
	w := newRefillWorld(t, 1, nil)
	w.get(t, 0, "a")
	w.get(t, 0, "b")
	w.heartbeat(t)
	w.restartEmpty(t, nil)
	var asked [][]string
	batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		asked = append(asked, keys)
		out := map[string][]byte{}
		for _, k := range keys {
			out[k] = []byte("batch:" + k)
		}
		return out, nil
	}
	res, errs := w.ps[0].ns.GetMany(context.Background(), []string{"a", "b", "c"}, batch)
	if errs != nil {
		t.Fatal(errs)
	}
	if string(res[0].Value) != "a@0" || string(res[1].Value) != "b@0" || string(res[2].Value) != "batch:c" {
		t.Fatalf("values %q %q %q", res[0].Value, res[1].Value, res[2].Value)
	}
	if len(asked) != 1 || len(asked[0]) != 1 || asked[0][0] != "c" || w.stat(0, "refills") != 2 {
		t.Fatalf("the loader was asked %q, %d write-backs; want only c loaded and a, b written back", asked, w.stat(0, "refills"))
	}
	w.holds(t, "a", "a@0", false)
	w.holds(t, "b", "b@0", false)
}

// The tier may answer again before the stream is heard again: the copies
// of the heard period before the gap are written back then too.
func TestRefillBeforeTheStreamIsHeardAgain(t *testing.T) {
	w := newRefillWorld(t, 1, nil)
	w.get(t, 0, "k")
	w.heartbeat(t)
	w.lose(t)
	w.shared.Restart()
	w.readFrom(t, 0, "k", holdfast.SourceMemory, 1, 1) // written back, no second load
}

// A copy the stream cannot vouch for is loaded, not written back: one
// loaded after the last heartbeat before the outage, or one from before an
// earlier gap. One loaded while the stream was heard, before that
// heartbeat, is written back.
func TestRefillOnlyCopiesTheStreamVouchesFor(t *testing.T) {
	w := newRefillWorld(t, 1, nil)
	w.get(t, 0, "old")
	w.heartbeat(t)
	w.restartEmpty(t, nil) // the earlier gap
	w.clk.Advance(time.Second)
	w.get(t, 0, "vouched")
	w.heartbeat(t)
	w.clk.Advance(100 * time.Millisecond)
	w.get(t, 0, "unvouched")
	w.restartEmpty(t, nil)

	refills, loads := w.stat(0, "refills"), w.stat(0, "loads")
	for _, k := range []string{"vouched", "unvouched", "old"} {
		w.get(t, 0, k)
	}
	if r, l := w.stat(0, "refills")-refills, w.stat(0, "loads")-loads; r != 1 || l != 2 {
		t.Fatalf("refills %d, loads %d; want the vouched copy written back and the two others loaded", r, l)
	}
	w.holds(t, "vouched", "vouched@0", false)
}

// A copy past its soft time is loaded, not written back.
func TestRefillNotPastSoftTime(t *testing.T) {
	w := newRefillWorld(t, 1, nil)
	w.get(t, 0, "k")
	w.heartbeat(t)
	w.restartEmpty(t, nil)
	w.clk.Advance(refillPolicy.SoftTTL)
	w.readFrom(t, 0, "k", holdfast.SourceLoaded, 0, 2)
}

// An invalidation another process makes right after the restart, which
// this process does not hear (it was not listening yet), refuses the
// write-back: the key loads its new value.
func TestRefillRefusedAfterAnInvalidationOnTheRestartedTier(t *testing.T) {
	w := newRefillWorld(t, 2, nil)
	w.get(t, 0, "k")
	w.heartbeat(t)
	w.lose(t)
	w.shared.Restart()
	want := w.src.update("k")
	if err := w.ps[1].ns.Invalidate(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	w.heartbeat(t)

	if res := w.get(t, 0, "k"); string(res.Value) != want {
		t.Fatalf("after another process's invalidation: %q from %v, want %q", res.Value, res.Source, want)
	}
	if n := w.stat(0, "refills"); n != 0 {
		t.Fatalf("%d write-backs over an invalidation", n)
	}
	w.holds(t, "k", want, false)
}

// An invalidation made while the tier was down is replayed by its process
// when the tier is back: whatever a write-back put there before, the replay
// removes it and is announced, and nothing is written back after it. Once
// it has landed, no process reads the old value.
func TestRefillNeverUndoesAnInvalidationMadeDuringTheOutage(t *testing.T) {
	w := newRefillWorld(t, 2, nil)
	old := string(w.get(t, 0, "k").Value)
	w.get(t, 1, "k")
	w.heartbeat(t)
	var want string
	w.restartEmpty(t, func() {
		want = w.src.update("k")
		if err := w.ps[1].ns.Invalidate(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if n := w.stat(1, "pending_deletes"); n != 1 {
			t.Fatalf("pending deletes %d, want the invalidation queued", n)
		}
	})
	// The first process reads at once, racing the replay: it may write
	// its copy back.
	if v := string(w.get(t, 0, "k").Value); v != old && v != want {
		t.Fatalf("first read %q", v)
	}
	eventually(t, "the replay", func() bool { return w.stat(1, "pending_deletes") == 0 })
	eventually(t, "the replayed invalidation to be heard", func() bool { return w.stat(0, "invalidations.heard") >= 1 })
	for p := range w.ps {
		if res := w.get(t, p, "k"); string(res.Value) != want {
			t.Fatalf("after the replay: %q from %v (reason %v), want %q", res.Value, res.Source, res.Reason, want)
		}
	}
	w.holds(t, "k", want, true)
}

// The race between the check and the write: another process invalidates
// the key after this one found its copy current and before its write-back
// reaches the tier. The tier refuses the write-back (the key now has a
// version), and the read loads the new value.
func TestRefillRaceWithAnInvalidation(t *testing.T) {
	var hooked *refillHook
	w := newRefillWorld(t, 2, func(t *inmem.Tier) tier.Tier {
		hooked = &refillHook{Tier: t}
		return hooked
	})
	w.get(t, 0, "k")
	w.heartbeat(t)
	w.restartEmpty(t, nil)

	var want string
	hooked.before = func() {
		want = w.src.update("k")
		if err := w.ps[1].ns.Invalidate(context.Background(), "k"); err != nil {
			t.Error(err)
		}
	}
	if res := w.get(t, 0, "k"); string(res.Value) != want || res.Source != holdfast.SourceLoaded {
		t.Fatalf("%q from %v, want %q loaded", res.Value, res.Source, want)
	}
	if n := w.stat(0, "refills"); n != 0 || hooked.calls.Load() != 1 {
		t.Fatalf("refills %d after %d write-backs sent; want the one refused", n, hooked.calls.Load())
	}
	w.holds(t, "k", want, true)
}

// A write-back the tier is slow to answer costs its readers the slow-read
// delay, as a slow shared-tier read does: they take the copy in memory
// (tier-slow) and the write-back goes on.
func TestRefillSlowWriteBackAnswersFromMemory(t *testing.T) {
	release := make(chan struct{})
	var hooked *refillHook
	w := newRefillWorld(t, 1, func(t *inmem.Tier) tier.Tier {
		hooked = &refillHook{Tier: t}
		return hooked
	})
	p := refillPolicy
	p.SlowReadGrace = 20 * time.Millisecond
	ns := newNS(t, w.ps[0].c, "slow", p)
	want := string(mustGet(t, ns, "k", w.src.Load).Value)
	w.heartbeat(t)
	w.restartEmpty(t, nil)
	hooked.before = func() { <-release }
	start := time.Now()
	res := mustGet(t, ns, "k", w.src.Load)
	waited := time.Since(start)
	close(release)
	if string(res.Value) != want || res.Source != holdfast.SourceMemory || res.Reason != holdfast.ReasonTierSlow {
		t.Fatalf("%q from %v (%v), want %q from memory, tier slow", res.Value, res.Source, res.Reason, want)
	}
	if waited > time.Second {
		t.Fatalf("waited %v for a stalled write-back", waited)
	}
	settle(t, ns, "k")
	if ns.Stats().Get("refills") != 1 || ns.Stats().Get("loads") != 1 {
		t.Fatalf("refills %d, loads %d; want the write-back landed and no load", ns.Stats().Get("refills"), ns.Stats().Get("loads"))
	}
}

// refillHook runs before once before the first write-back reaches the tier.
type refillHook struct {
	*inmem.Tier
	before func()
	calls  atomic.Int64
}

func (h *refillHook) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	h.calls.Add(1)
	if f := h.before; f != nil {
		h.before = nil
		f()
	}
	return h.Tier.Refill(ctx, it)
}

// decodeValue is the payload of an envelope the tier holds.
func decodeValue(t *testing.T, raw []byte) []byte {
	t.Helper()
	if raw == nil {
		return nil
	}
	e, err := tier.DecodeEntry(raw)
	if err != nil {
		t.Fatal(err)
	}
	return e.Value
}

// withoutRefill hides the tier's Refiller (and every capability but the
// stream's), for tests of what a miss does when nothing is written back.
type withoutRefill struct{ tier.InvalidationStream }
