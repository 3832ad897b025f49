package holdfast_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// The grace the tests give a slow load. Timers never fire early, so a
// reader answered stale has waited at least this long; a reader that must
// wait for the load is checked after many graces have passed, and its
// load is held on a channel, so neither check depends on how fast the
// machine is.
const testGrace = 20 * time.Millisecond

// answer is one read's outcome, from a read run on its own goroutine.
type answer struct {
	res    holdfast.Result
	err    error
	waited time.Duration
}

// getAsync reads key on a goroutine the test waits for at its end.
func getAsync(t *testing.T, ns *holdfast.Namespace, key string, l holdfast.Loader) <-chan answer {
	ch := make(chan answer, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() {
		start := time.Now()
		res, err := ns.Get(context.Background(), key, l)
		ch <- answer{res, err, time.Since(start)}
	})
	return ch
}

// within returns the answer from ch, failing the test if none comes
// within 5 s: far longer than any grace, far shorter than LoadTimeout.
func within(t *testing.T, ch <-chan answer, what string) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer after 5 s", what)
		return answer{}
	}
}

// stillWaiting fails the test if ch has an answer after ten graces.
func stillWaiting(t *testing.T, ch <-chan answer, what string) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s: answered %q from %v (%v) while its load was still running; want it to wait for the load", what, a.res.Value, a.res.Source, a.err)
	case <-time.After(10 * testGrace):
	}
}

// slowLoadNS is a namespace whose values are hard after 1 s and may be
// served for a minute past that, on a fake clock and an in-memory shared
// tier, with keys "k" and "j" loaded once ("v1:k", "v1:j") and the clock then moved past its
// hard time.
func slowLoadNS(t *testing.T, p holdfast.Policy) (*holdfast.Namespace, *inmem.Tier, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	if p.TTL == 0 {
		p.TTL = time.Second
	}
	if p.StaleIfError == 0 {
		p.StaleIfError = time.Minute
	}
	p.LoadErrorBackoff = -1
	ns := newNS(t, newCache(t, holdfast.Options{Shared: shared, Clock: clk}), "product", p)
	mustGet(t, ns, "k", (&countingLoader{}).Load)
	mustGet(t, ns, "j", (&countingLoader{}).Load)
	clk.Advance(2 * time.Second)
	return ns, shared, clk
}

// A reader holding a value past its hard time, within its stale-if-error
// window, waits for a slow load only SlowLoadGrace, then gets that value;
// the load goes on, on a context its reader's leaving did not cancel, and
// its value is stored and served next.
func TestSlowLoadServesStaleAfterGrace(t *testing.T) {
	ns, shared, _ := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: testGrace})
	slow := &countingLoader{gate: make(chan struct{})}
	slow.calls.Store(1) // its value is v2:k
	a := within(t, getAsync(t, ns, "k", slow.Load), "reader of a past-hard value")
	if a.err != nil || string(a.res.Value) != "v1:k" || !answered(a.res, holdfast.SourceShared, holdfast.ReasonSourceSlow, true) || !a.res.Stale() {
		t.Fatalf("got %q from %v (%v); want v1:k, stale-on-slow-load", a.res.Value, a.res.Source, a.err)
	}
	if a.waited < testGrace {
		t.Fatalf("answered after %v, before the grace of %v", a.waited, testGrace)
	}
	if st := ns.Stats(); st.Get("stale_on_slow_load") != 1 || st.Get("stale_on_error") != 0 {
		t.Fatalf("stale on slow load %d, stale on error %d; want 1, 0", st.Get("stale_on_slow_load"), st.Get("stale_on_error"))
	}
	if !ns.Loading("k") {
		t.Fatal("the load ended with its reader's wait")
	}
	close(slow.gate) // the countingLoader returns ctx.Err() if its context ended
	settle(t, ns, "k")
	if raw, ok := shared.Raw("product:k"); !ok || !strings.Contains(string(raw), "v2:k") {
		t.Fatalf("the slow load's value is not in the shared tier: %q", raw)
	}
	if res := mustGet(t, ns, "k", slow.Load); string(res.Value) != "v2:k" || res.Source != holdfast.SourceHot {
		t.Fatalf("next read: %q from %v; want the slow load's v2:k from the hot tier", res.Value, res.Source)
	}
	if slow.calls.Load() != 2 {
		t.Fatalf("%d loads, want 1", slow.calls.Load()-1)
	}
}

// While the shared tier is failing, a reader holding a value stale-if-error
// would serve waits for a slow load no longer than the slow-read delay,
// however long SlowLoadGrace is; while it is healthy, SlowLoadGrace holds.
func TestSlowLoadGraceShortWhileSharedTierFails(t *testing.T) {
	ns, shared, _ := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: 2 * time.Second, LoadTimeout: 10 * time.Second, SlowReadGrace: testGrace})
	slow := &countingLoader{gate: make(chan struct{})}
	t.Cleanup(func() { close(slow.gate) })

	healthy := getAsync(t, ns, "j", slow.Load)
	stillWaiting(t, healthy, "reader of a past-hard value, the shared tier healthy")

	shared.Fail(errors.New("down"))
	a := within(t, getAsync(t, ns, "k", slow.Load), "reader of a past-hard value, the shared tier failing")
	if a.err != nil || string(a.res.Value) != "v1:k" || !answered(a.res, holdfast.SourceMemory, holdfast.ReasonSourceSlow, true) || !a.res.Stale() {
		t.Fatalf("got %q from %v (%v); want v1:k, stale-on-slow-load", a.res.Value, a.res.Source, a.err)
	}
	if a.waited < testGrace || a.waited >= time.Second {
		t.Fatalf("answered after %v; want the slow-read delay (%v), far short of SlowLoadGrace", a.waited, testGrace)
	}
	if !ns.Loading("k") {
		t.Fatal("the load ended with its reader's wait")
	}
}

// Only a value within its stale-if-error window and past its hard time is
// served on a slow load: a reader with nothing in hand, or with a value
// past its window, waits for the load as before.
func TestSlowLoadGraceOnlyWithinStaleIfError(t *testing.T) {
	ns, _, clk := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: testGrace, StaleIfError: 10 * time.Second})
	clk.Advance(10 * time.Second) // now 12 s: k's window (to 11 s) is over
	mustGet(t, ns, "within", (&countingLoader{}).Load)
	clk.Advance(2 * time.Second) // now 14 s: "within" is past hard, in its window
	slow := &countingLoader{gate: make(chan struct{})}
	inWindow := getAsync(t, ns, "within", slow.Load)
	past := getAsync(t, ns, "k", slow.Load)
	cold := getAsync(t, ns, "cold", slow.Load)
	if a := within(t, inWindow, "reader within its window"); !answered(a.res, holdfast.SourceShared, holdfast.ReasonSourceSlow, true) {
		t.Fatalf("reader within its window: %q from %v (%v); want stale-on-slow-load", a.res.Value, a.res.Source, a.err)
	}
	stillWaiting(t, past, "reader of a value past its stale-if-error window")
	stillWaiting(t, cold, "reader with no value")
	close(slow.gate)
	for what, ch := range map[string]<-chan answer{"past its window": past, "cold": cold} {
		if a := within(t, ch, what); a.err != nil || a.res.Source != holdfast.SourceLoaded {
			t.Fatalf("%s: %q from %v (%v); want the load's value", what, a.res.Value, a.res.Source, a.err)
		}
	}
	if n := ns.Stats().Get("stale_on_slow_load"); n != 1 {
		t.Fatalf("stale on slow load %d, want 1", n)
	}
}

// The default grace serves the stale value; a negative one turns it off,
// and the reader waits for the load.
func TestSlowLoadGraceDefaultAndOff(t *testing.T) {
	on, _, _ := slowLoadNS(t, holdfast.Policy{})
	off, _, _ := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: -1})
	slow := &countingLoader{gate: make(chan struct{})}
	if a := within(t, getAsync(t, on, "k", slow.Load), "default grace"); !answered(a.res, holdfast.SourceShared, holdfast.ReasonSourceSlow, true) || a.waited < holdfast.DefaultSlowLoadGrace {
		t.Fatalf("default grace: %q from %v after %v; want stale-on-slow-load after %v", a.res.Value, a.res.Source, a.waited, holdfast.DefaultSlowLoadGrace)
	}
	offRead := getAsync(t, off, "k", slow.Load)
	stillWaiting(t, offRead, "grace off")
	close(slow.gate)
	if a := within(t, offRead, "grace off"); a.err != nil || a.res.Source != holdfast.SourceLoaded {
		t.Fatalf("grace off: %q from %v (%v); want the load's value", a.res.Value, a.res.Source, a.err)
	}
}

// A grace the load would time out before is refused; the default gives
// way to a LoadTimeout as short as itself.
func TestSlowLoadGraceValidated(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	if _, err := c.Namespace("long", holdfast.Policy{SlowLoadGrace: time.Second, LoadTimeout: time.Second}); err == nil || !strings.Contains(err.Error(), "SlowLoadGrace") {
		t.Fatalf("SlowLoadGrace = LoadTimeout: %v; want an error naming SlowLoadGrace", err)
	}
	if _, err := c.Namespace("short", holdfast.Policy{LoadTimeout: 10 * time.Millisecond}); err != nil {
		t.Fatalf("default grace with a 10 ms LoadTimeout: %v", err)
	}
}

// Readers that join a slow flight each wait at most the grace from when
// they began waiting, including one that joined before the flight knew
// which value it could serve (its shared-tier read was stalled past the
// grace), and one that joined after the first was answered.
func TestSlowLoadGraceForCollapsedReaders(t *testing.T) {
	ns, shared, _ := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: testGrace})
	slow := &countingLoader{gate: make(chan struct{})}
	gets := shared.Calls().Gets
	thaw := shared.Stall()
	leader := getAsync(t, ns, "k", slow.Load)
	eventually(t, "the leader's shared-tier read", func() bool { return shared.Calls().Gets > gets })
	early := getAsync(t, ns, "k", slow.Load)
	eventually(t, "the early reader to join", func() bool { return ns.Stats().Get("coalesced") == 1 })
	time.Sleep(5 * testGrace) // the early reader's grace passes before the flight's lookup ends
	thaw()
	for what, ch := range map[string]<-chan answer{"leader": leader, "early joiner": early} {
		a := within(t, ch, what)
		if a.err != nil || string(a.res.Value) != "v1:k" || !answered(a.res, holdfast.SourceShared, holdfast.ReasonSourceSlow, true) {
			t.Fatalf("%s: %q from %v (%v); want v1:k stale-on-slow-load", what, a.res.Value, a.res.Source, a.err)
		}
		if a.res.Collapsed != (what != "leader") {
			t.Fatalf("%s: Collapsed %v", what, a.res.Collapsed)
		}
	}
	late := within(t, getAsync(t, ns, "k", slow.Load), "late joiner")
	if !answered(late.res, holdfast.SourceShared, holdfast.ReasonSourceSlow, true) || !late.res.Collapsed || late.waited < testGrace {
		t.Fatalf("late joiner: %v collapsed %v after %v; want stale-on-slow-load, collapsed, after its own grace", late.res.Source, late.res.Collapsed, late.waited)
	}
	if slow.calls.Load() != 1 {
		t.Fatalf("%d loads, want 1", slow.calls.Load())
	}
	close(slow.gate)
	settle(t, ns, "k")
	if n := ns.Stats().Get("stale_on_slow_load"); n != 3 {
		t.Fatalf("stale on slow load %d, want 3", n)
	}
}

// GetMany's readers get the same grace; the batch load goes on and stores
// every key.
func TestSlowLoadGraceGetMany(t *testing.T) {
	ns, shared, _ := slowLoadNS(t, holdfast.Policy{SlowLoadGrace: testGrace})
	gate := make(chan struct{})
	batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k] = []byte("batch:" + k)
		}
		return out, nil
	}
	done := make(chan []holdfast.Result, 1)
	go func() {
		res, _ := ns.GetMany(context.Background(), []string{"k", "j"}, batch)
		done <- res
	}()
	select {
	case res := <-done:
		for i, k := range []string{"k", "j"} {
			if string(res[i].Value) != "v1:"+k || !answered(res[i], holdfast.SourceShared, holdfast.ReasonSourceSlow, true) {
				t.Fatalf("GetMany, %s: %q from %v; want v1:%s stale-on-slow-load", k, res[i].Value, res[i].Source, k)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetMany: no answer after 5 s")
	}
	close(gate)
	for _, k := range []string{"k", "j"} {
		settle(t, ns, k)
		if raw, ok := shared.Raw("product:" + k); !ok || !strings.Contains(string(raw), "batch:"+k) {
			t.Fatalf("the batch load's value of %s is not in the shared tier: %q", k, raw)
		}
	}
}
