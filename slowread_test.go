package holdfast_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
	"github.com/holdfast-dev/holdfast/tier"
)

// The tests of answering from memory stall the in-memory shared tier (a
// frozen server: calls block until thawed) and give the slow-read delay
// testGrace: timers never fire early, so a reader answered from memory has
// waited at least that long, and a reader that must wait for the tier is
// checked after ten of them.

// slowReadNS is a namespace on a fake clock and an in-memory shared tier
// with a TTL of a minute and SlowReadGrace testGrace (unless p says
// otherwise), holding "k" and "j" as loaded once ("v1:k", "v1:j"). The
// returned stall freezes the tier until the test ends (or its thaw is
// called), and is thawed before the Cache closes; it leaves a read of the
// key "stuck" waiting on the tier and moves the clock past the slow-read
// delay, so that the Cache has seen the tier answer nothing for that long
// (a tier that looks healthy is read on its reader's goroutine), but not
// past four of them, after which a read with nothing in memory skips the
// tier (TestStalledSharedTierPassedOver).
func slowReadNS(t *testing.T, p holdfast.Policy) (ns *holdfast.Namespace, shared *inmem.Tier, clk *fakeclock.Clock, stall func() (thaw func())) {
	t.Helper()
	clk = fakeclock.New(t0)
	shared = inmem.New(clk.Now)
	if p.TTL == 0 {
		p.TTL = time.Minute
	}
	if p.SlowReadGrace == 0 {
		p.SlowReadGrace = testGrace
	}
	p.LoadErrorBackoff = -1
	if p.Hot.Threshold == 0 {
		// Only hot keys in the hot tier, so that k and j are read from
		// the shared tier.
		p.Hot.Threshold = 1000.0 / 60
	}
	ns = newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	mustGet(t, ns, "k", (&countingLoader{}).Load)
	mustGet(t, ns, "j", (&countingLoader{}).Load)
	stall = func() func() {
		thaw := shared.Stall()
		getAsync(t, ns, "stuck", (&countingLoader{}).Load)
		t.Cleanup(thaw) // before the wait for stuck's reader and the Cache's Close, registered earlier
		eventually(t, "the read of stuck to begin", func() bool { return ns.Loading("stuck") })
		clk.Advance(2 * testGrace)
		return thaw
	}
	return ns, shared, clk, stall
}

// A read of a frozen shared tier is answered from last-known-good once the
// slow-read delay has passed, while the read goes on; when the tier
// answers, its newer value reaches the stores.
func TestSlowSharedReadAnsweredFromMemory(t *testing.T) {
	ns, shared, clk, stall := slowReadNS(t, holdfast.Policy{})
	clk.Advance(time.Second)
	// Another process stored a newer value, which the frozen read will bring.
	now := clk.Now()
	shared.Put("product:k", tier.AppendEntry(nil, tier.Entry{Value: []byte("v9:k"), Origin: now, Soft: now.Add(time.Minute), Hard: now.Add(time.Minute)}), time.Hour)
	thaw := stall()

	a := within(t, getAsync(t, ns, "k", (&countingLoader{}).Load), "reader of a frozen tier")
	if a.err != nil || string(a.res.Value) != "v1:k" || (a.res.Source != holdfast.SourceMemory || a.res.Reason != holdfast.ReasonTierSlow) || a.res.Stale() {
		t.Fatalf("got %q from %v (stale %v, %v); want v1:k, memory-on-slow-read, not stale", a.res.Value, a.res.Source, a.res.Stale(), a.err)
	}
	if a.waited < testGrace {
		t.Fatalf("answered after %v, before the slow-read delay of %v", a.waited, testGrace)
	}
	if st := ns.Stats(); st.Get("memory_on_slow_read") != 1 || st.Get("local_served") != 0 {
		t.Fatalf("memory on slow read %d, local served %d; want 1, 0", st.Get("memory_on_slow_read"), st.Get("local_served"))
	}
	if !ns.Loading("k") {
		t.Fatal("the shared read ended with its reader's wait")
	}
	// A reader that joins the frozen read is answered from memory too.
	if a := within(t, getAsync(t, ns, "k", (&countingLoader{}).Load), "second reader"); (a.res.Source != holdfast.SourceMemory || a.res.Reason != holdfast.ReasonTierSlow) || !a.res.Collapsed {
		t.Fatalf("second reader: %q from %v (collapsed %v); want memory-on-slow-read, collapsed", a.res.Value, a.res.Source, a.res.Collapsed)
	}

	thaw()
	settle(t, ns, "k")
	// The tier's answer is in last-known-good: with the tier down, it is
	// what answers.
	shared.Fail(errors.New("down"))
	if res := mustGet(t, ns, "k", (&countingLoader{}).Load); string(res.Value) != "v9:k" || !answered(res, holdfast.SourceMemory, holdfast.ReasonTierDown, false) {
		t.Fatalf("after the thaw, with the tier down: %q from %v; want the frozen read's v9:k from last-known-good", res.Value, res.Source)
	}
}

// The first read of a tier that froze while it looked healthy runs on its
// reader's goroutine and waits for the tier, as before; a reader that joins
// it is answered from memory.
func TestSlowSharedReadJoinerAnsweredFromMemory(t *testing.T) {
	ns, shared, _, _ := slowReadNS(t, holdfast.Policy{})
	thaw := shared.Stall()
	first := getAsync(t, ns, "k", (&countingLoader{}).Load)
	t.Cleanup(thaw) // before the wait for first's reader
	eventually(t, "the read of k to begin", func() bool { return ns.Loading("k") })
	a := within(t, getAsync(t, ns, "k", (&countingLoader{}).Load), "reader joining a frozen read")
	if a.err != nil || string(a.res.Value) != "v1:k" || (a.res.Source != holdfast.SourceMemory || a.res.Reason != holdfast.ReasonTierSlow) || !a.res.Collapsed {
		t.Fatalf("joiner: %q from %v (collapsed %v, %v); want v1:k from memory, collapsed", a.res.Value, a.res.Source, a.res.Collapsed, a.err)
	}
	stillWaiting(t, first, "the first reader, on its own goroutine")
	thaw()
	if a := within(t, first, "the first reader after the thaw"); a.err != nil || a.res.Source != holdfast.SourceShared {
		t.Fatalf("first reader: %q from %v (%v); want the tier's answer", a.res.Value, a.res.Source, a.err)
	}
}

// Without a value in memory a reader waits for the frozen tier as before,
// and so it does with SlowReadGrace negative.
func TestSlowSharedReadWithoutMemoryWaits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		key   string
	}{
		{"no value in memory", 0, "cold"},
		{"turned off", -1, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, _, stall := slowReadNS(t, holdfast.Policy{SlowReadGrace: tc.grace})
			thaw := stall()
			ch := getAsync(t, ns, tc.key, (&countingLoader{}).Load)
			stillWaiting(t, ch, "reader of a frozen tier")
			thaw()
			a := within(t, ch, "reader after the thaw")
			if a.err != nil || a.res.Reason == holdfast.ReasonTierSlow {
				t.Fatalf("got %q from %v (%v); want the tier's or the loader's answer", a.res.Value, a.res.Source, a.err)
			}
			if st := ns.Stats(); st.Get("memory_on_slow_read") != 0 {
				t.Fatalf("memory on slow read %d, want 0", st.Get("memory_on_slow_read"))
			}
		})
	}
}

// Once the shared tier has answered none of the reads waiting on it for
// four slow-read delays, a read with nothing in memory to serve skips it and
// loads, as if the breaker had bypassed it, instead of waiting the read
// budget; a read with a value in memory still reads it in the background.
func TestStalledSharedTierPassedOver(t *testing.T) {
	ns, _, clk, stall := slowReadNS(t, holdfast.Policy{})
	thaw := stall()
	clk.Advance(3 * testGrace) // 5 delays since the stuck read began
	loader := &countingLoader{}
	ch := getAsync(t, ns, "cold", loader.Load)
	t.Cleanup(thaw) // before the wait for this reader, should it be waiting on the tier
	a := within(t, ch, "reader of a key the frozen tier holds, nothing in memory")
	if a.err != nil || a.res.Source != holdfast.SourceLoaded || string(a.res.Value) != "v1:cold" {
		t.Fatalf("got %q from %v (%v); want the loader's v1:cold", a.res.Value, a.res.Source, a.err)
	}
	if st := ns.Stats(); st.Get("shared.bypassed") != 1 || loader.calls.Load() != 1 {
		t.Fatalf("shared bypassed %d, loads %d; want 1, 1", st.Get("shared.bypassed"), loader.calls.Load())
	}
	a = within(t, getAsync(t, ns, "k", (&countingLoader{}).Load), "reader with a value in memory")
	if a.err != nil || (a.res.Source != holdfast.SourceMemory || a.res.Reason != holdfast.ReasonTierSlow) {
		t.Fatalf("got %q from %v (%v); want memory-on-slow-read", a.res.Value, a.res.Source, a.err)
	}
	if st := ns.Stats(); st.Get("shared.bypassed") != 1 {
		t.Fatalf("shared bypassed %d; want the read with a value in memory sent to the tier", st.Get("shared.bypassed"))
	}
}

// A value past its hard time, within its stale-if-error window, answers a
// slow read only while the shared tier is failing: a slow tier that has
// not failed is waited for.
func TestSlowSharedReadPastHardOnlyWhileTierFails(t *testing.T) {
	ns, shared, clk, stall := slowReadNS(t, holdfast.Policy{TTL: time.Second, StaleIfError: time.Minute})
	clk.Advance(2 * time.Second)

	thaw := stall()
	ch := getAsync(t, ns, "k", (&countingLoader{}).Load)
	stillWaiting(t, ch, "reader of a past-hard value, the tier not failing")
	thaw()
	if a := within(t, ch, "reader after the thaw"); a.err != nil || a.res.Reason == holdfast.ReasonTierSlow {
		t.Fatalf("got %q from %v (%v); want the load's answer", a.res.Value, a.res.Source, a.err)
	}

	// The tier fails a read, then freezes.
	shared.Fail(errors.New("down"))
	mustGet(t, ns, "x", (&countingLoader{}).Load)
	shared.Fail(nil)
	stall()
	a := within(t, getAsync(t, ns, "j", (&countingLoader{}).Load), "reader of a past-hard value, the tier failing")
	if a.err != nil || string(a.res.Value) != "v1:j" || (a.res.Source != holdfast.SourceMemory || a.res.Reason != holdfast.ReasonTierSlow) || !a.res.Stale() {
		t.Fatalf("got %q from %v (stale %v, %v); want v1:j, memory-on-slow-read, stale", a.res.Value, a.res.Source, a.res.Stale(), a.err)
	}
}

// GetMany's keys are answered from memory as Get's are.
func TestSlowSharedReadGetMany(t *testing.T) {
	ns, _, _, stall := slowReadNS(t, holdfast.Policy{})
	stall()
	type many struct {
		res  []holdfast.Result
		errs []error
	}
	ch := make(chan many, 1)
	go func() {
		res, errs := ns.GetMany(context.Background(), []string{"k", "j"}, func(ctx context.Context, keys []string) (map[string][]byte, error) {
			return nil, errors.New("no load expected")
		})
		ch <- many{res, errs}
	}()
	select {
	case m := <-ch:
		if m.errs != nil {
			t.Fatalf("errors %v", m.errs)
		}
		for i, want := range []string{"v1:k", "v1:j"} {
			if r := m.res[i]; string(r.Value) != want || (r.Source != holdfast.SourceMemory || r.Reason != holdfast.ReasonTierSlow) {
				t.Fatalf("key %d: %q from %v; want %s from memory", i, r.Value, r.Source, want)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetMany of a frozen tier: no answer after 5 s")
	}
}

// With a tier that answers, no read is answered from memory. The delay is
// wide here (a busy machine under -race can pause a goroutine for
// milliseconds); the lab's no-fault runs measure the default.
func TestHealthySharedTierNeverAnswersFromMemory(t *testing.T) {
	ns, _, _, _ := slowReadNS(t, holdfast.Policy{SlowReadGrace: 200 * time.Millisecond, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	l := &countingLoader{}
	for i := range 2000 {
		mustGet(t, ns, []string{"k", "j"}[i%2], l.Load)
	}
	if st := ns.Stats(); st.Get("memory_on_slow_read") != 0 || st.Get("shared.hits") < 2000 {
		t.Fatalf("memory on slow read %d, shared hits %d; want 0, 2000", st.Get("memory_on_slow_read"), st.Get("shared.hits"))
	}
}
