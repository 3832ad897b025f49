package holdfast_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// The real-Redis versions of these tests are in package redis
// (stream_test.go); here the inmem tier's stream stands for it.

// source is a database: each key has a version that updates bump.
type source struct {
	mu   sync.Mutex
	vers map[string]int
	err  error
}

func (s *source) Load(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return fmt.Appendf(nil, "%s@%d", key, s.vers[key]), nil
}

func (s *source) update(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vers == nil {
		s.vers = make(map[string]int)
	}
	s.vers[key]++
	return fmt.Sprintf("%s@%d", key, s.vers[key])
}

func (s *source) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// hotEverywhere keeps every key read in the hot tier, for an hour.
var hotEverywhere = holdfast.Policy{TTL: time.Hour, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{Threshold: -1, TTL: time.Hour}}

func TestInvalidationHeardByEveryProcess(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	a := newListeningNS(t, holdfast.Options{Shared: shared}, hotEverywhere)
	b := newListeningNS(t, holdfast.Options{Shared: shared}, hotEverywhere)
	mustGet(t, b, "p1", src.Load)
	settle(t, b, "p1")
	if res := mustGet(t, b, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("b's second read from %v, want its hot tier", res.Source)
	}
	want := src.update("p1")
	if err := a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to serve the update", func() bool { return string(mustGet(t, b, "p1", src.Load).Value) == want })
	eventually(t, "b's counters", func() bool { return b.Stats().Get("invalidations.applied") == 1 })
	sa, sb := a.Stats(), b.Stats()
	if sa.Get("invalidations.sent") != 1 || sb.Get("invalidations.heard") != 1 || sb.Get("invalidations.applied") != 1 {
		t.Fatalf("a sent %d; b heard %d, applied %d; want 1, 1, 1", sa.Get("invalidations.sent"), sb.Get("invalidations.heard"), sb.Get("invalidations.applied"))
	}
	if sa.Get("invalidations.applied") != 0 {
		t.Fatalf("a applied its own announcement (%d)", sa.Get("invalidations.applied"))
	}
	if sb.Get("capability.stream") != 1 {
		t.Fatal("capability.stream not set")
	}
}

// While the stream cannot be heard, the hot tier goes on answering for
// Hot.MaxUnheard, then is emptied and admits nothing until the stream is
// heard again.
func TestUnheardStreamKeepsTheHotTierThenEmptiesIt(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	src := &source{}
	p := hotEverywhere
	p.Hot.MaxUnheard = 10 * time.Second
	a := newListeningNS(t, holdfast.Options{Shared: shared, Clock: clk}, p)
	b := newListeningNS(t, holdfast.Options{Shared: shared, Clock: clk}, p)
	old := string(mustGet(t, b, "p1", src.Load).Value)
	settle(t, b, "p1")

	shared.Deafen()
	src.update("p1")
	if err := a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	time.Sleep(200 * time.Millisecond) // several of the watcher's looks
	if res := mustGet(t, b, "p1", src.Load); res.Source != holdfast.SourceHot || string(res.Value) != old {
		t.Fatalf("9 s unheard: %q from %v, want the hot copy %q (no flush)", res.Value, res.Source, old)
	}
	if st := b.Stats(); st.Get("stream.unheard") < 9000 {
		t.Fatalf("UnheardMillis %d after 9 s: %+v", st.Get("stream.unheard"), st)
	}
	clk.Advance(2 * time.Second)
	eventually(t, "the hot tier to be emptied", func() bool { return b.Stats().Get("hot.entries") == 0 })
	res := mustGet(t, b, "p1", src.Load)
	if res.Source == holdfast.SourceHot || string(res.Value) == old {
		t.Fatalf("11 s unheard: %q from %v", res.Value, res.Source)
	}
	mustGet(t, b, "p1", src.Load)
	if st := b.Stats(); st.Get("hot.entries") != 0 {
		t.Fatalf("the hot tier admitted %d entries while unheard", st.Get("hot.entries"))
	}

	shared.Hear()
	eventually(t, "the hot tier to admit again", func() bool {
		mustGet(t, b, "p1", src.Load)
		return b.Stats().Get("hot.entries") == 1 && b.Stats().Get("stream.unheard") == 0
	})
}

// When the stream is heard again, every hot copy from before the gap is
// dropped: the one whose invalidation was lost is read again at its new
// value, the others at theirs, from the shared tier, none loaded.
func TestStreamHeardAgainDropsTheHotCopiesFromBefore(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	a := newListeningNS(t, holdfast.Options{Shared: shared}, hotEverywhere)
	b := newListeningNS(t, holdfast.Options{Shared: shared}, hotEverywhere)
	for _, k := range []string{"p1", "p2", "p3"} {
		mustGet(t, b, k, src.Load)
		settle(t, b, k)
	}
	before := b.Stats()

	shared.Deafen()
	want := src.update("p1")
	if err := a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	if res := mustGet(t, b, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("b read p1 from %v during the gap, want its hot copy", res.Source)
	}
	shared.Hear()
	eventually(t, "the drop", func() bool { return b.Stats().Get("stream.gap_dropped")-before.Get("stream.gap_dropped") == 3 })
	if n := b.Stats().Get("hot.entries"); n != 0 {
		t.Fatalf("%d hot entries after the drop, want 0", n)
	}
	loads := b.Stats().Get("loads")
	if res := mustGet(t, b, "p1", src.Load); string(res.Value) != want {
		t.Fatalf("after the gap b read %q from %v, want %q", res.Value, res.Source, want)
	}
	if res := mustGet(t, b, "p2", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("p2 from %v after the gap, want the shared tier", res.Source)
	}
	if n := b.Stats().Get("loads") - loads; n != 1 {
		t.Fatalf("%d loads after the gap, want 1 (p1, invalidated)", n)
	}
	settle(t, b, "p2")
	if res := mustGet(t, b, "p2", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("p2 from %v once read again, want the hot tier", res.Source)
	}
}

// Another process's invalidation demotes this one's last-known-good copy:
// no longer served as current while the shared tier is down, still served
// when the source fails too (stale-if-error).
func TestInvalidationHeardDemotesLastKnownGood(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	p := hotEverywhere
	p.Hot.MaxBytes = -1 // no hot tier
	a := newListeningNS(t, holdfast.Options{Shared: shared}, p)
	b := newListeningNS(t, holdfast.Options{Shared: shared}, p)
	for _, k := range []string{"p1", "p2"} {
		mustGet(t, b, k, src.Load)
		settle(t, b, k)
		src.update(k)
	}
	if err := a.Invalidate(context.Background(), "p1", "p2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to hear both", func() bool { return b.Stats().Get("invalidations.applied") == 2 })
	shared.Fail(inmem.ErrInjected)
	if res := mustGet(t, b, "p1", src.Load); string(res.Value) != "p1@1" {
		t.Fatalf("shared tier down, source up: %q from %v, want the update p1@1", res.Value, res.Source)
	}
	src.fail(errors.New("db down"))
	res, err := b.Get(context.Background(), "p2", src.Load)
	if err != nil || !res.Stale() || string(res.Value) != "p2@0" {
		t.Fatalf("shared tier and source down: %q from %v (%v), want the demoted p2@0, stale", res.Value, res.Source, err)
	}
}

// A process started while others run fills its hot tier from the shared hot
// set before its first read.
func TestWarmStartFromTheSharedHotSet(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	p := holdfast.Policy{TTL: time.Hour, Hot: holdfast.HotPolicy{Threshold: 50, HalfLife: time.Second, Share: true}}
	opts := holdfast.Options{Shared: shared, HotShareInterval: 20 * time.Millisecond}
	a := newListeningNS(t, opts, p)
	for range 2000 {
		mustGet(t, a, "viral", src.Load)
	}
	settle(t, a, "viral")
	eventually(t, "a to publish its hot key", func() bool { return a.Stats().Get("shared_hot_keys") == 1 })

	b := newListeningNS(t, opts, p)
	eventually(t, "b's warm start", func() bool { return b.Stats().Get("warm_start.keys") == 1 })
	if res := mustGet(t, b, "viral", src.Load); res.Source != holdfast.SourceHot || string(res.Value) != "viral@0" {
		t.Fatalf("b's first read: %q from %v, want viral@0 from the hot tier", res.Value, res.Source)
	}
	if st := b.Stats(); st.Get("warm_start.bytes") == 0 || st.Get("loads") != 0 {
		t.Fatalf("warm start bytes %d, loads %d", st.Get("warm_start.bytes"), st.Get("loads"))
	}
	p.Hot.NoWarmStart = true
	c := newListeningNS(t, opts, p)
	time.Sleep(50 * time.Millisecond)
	if res := mustGet(t, c, "viral", src.Load); res.Source == holdfast.SourceHot {
		t.Fatal("NoWarmStart: the first read came from the hot tier")
	}
}

// newListeningNS is newNS on a new Cache that hears its tier's stream: a
// process started moments before an announcement may miss it (and
// revalidates what it holds when it first hears the stream).
func newListeningNS(t *testing.T, opts holdfast.Options, p holdfast.Policy) *holdfast.Namespace {
	t.Helper()
	c := newCache(t, opts)
	eventually(t, "the stream to be heard", func() bool { return c.StreamHeard() })
	return newNS(t, c, "product", p)
}

// fallbackPair is two processes hearing one stream, on one fake clock,
// whose values live 1 s and may serve a failed load 10 s past that, with no
// hot tier: what b's failed load gets is its last-known-good copy.
type fallbackPair struct {
	clk    *fakeclock.Clock
	shared *inmem.Tier
	src    *source
	a, b   *holdfast.Namespace
}

func newFallbackPair(t *testing.T) *fallbackPair {
	fp := &fallbackPair{clk: fakeclock.New(t0), src: &source{}}
	fp.shared = inmem.New(fp.clk.Now)
	p := holdfast.Policy{TTL: time.Second, StaleIfError: 10 * time.Second, Hot: holdfast.HotPolicy{MaxBytes: -1}}
	fp.a = newListeningNS(t, holdfast.Options{Shared: fp.shared, Clock: fp.clk}, p)
	fp.b = newListeningNS(t, holdfast.Options{Shared: fp.shared, Clock: fp.clk}, p)
	return fp
}

// heardOnB updates p1 and invalidates it from a, until b has applied it.
func (fp *fallbackPair) heardOnB(t *testing.T) {
	t.Helper()
	applied := fp.b.Stats().Get("invalidations.applied")
	fp.src.update("p1")
	if err := fp.a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to hear it", func() bool { return fp.b.Stats().Get("invalidations.applied") == applied+1 })
}

// wantFallback reads p1 from b with the shared tier and the source down,
// and wants want, stale-on-error from memory.
func (fp *fallbackPair) wantFallback(t *testing.T, want, when string) {
	t.Helper()
	fp.shared.Fail(inmem.ErrInjected)
	fp.src.fail(errors.New("db down"))
	res, err := fp.b.Get(context.Background(), "p1", fp.src.Load)
	if err != nil || !answered(res, holdfast.SourceMemory, holdfast.ReasonSourceFailed, true) || string(res.Value) != want {
		t.Fatalf("%s, shared tier and source down: %q from %v (%v), want %s stale-on-error", when, res.Value, res.Source, err, want)
	}
}

// A copy another process's invalidation left a fallback keeps the
// stale-if-error window it had: a failed load past its hard time, within
// hard + StaleIfError, still gets it, however long before that another
// process invalidated it.
func TestDemotedLastKnownGoodKeepsItsStaleIfErrorWindow(t *testing.T) {
	fp := newFallbackPair(t)
	mustGet(t, fp.b, "p1", fp.src.Load)
	fp.heardOnB(t)
	fp.clk.Advance(10500 * time.Millisecond) // past hard (1 s), within hard + 10 s
	fp.wantFallback(t, "p1@0", "10.5 s on")
}

// A key's watermark keeps this process's own invalidation and another's
// apart: a copy loaded after this process invalidated the key, and before
// another process did, is a fallback for a failed load, not dropped.
func TestCopyBetweenOwnAndHeardInvalidationIsAFallback(t *testing.T) {
	fp := newFallbackPair(t)
	mustGet(t, fp.b, "p1", fp.src.Load)
	fp.src.update("p1")
	fp.clk.Advance(time.Millisecond)
	if err := fp.b.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	fp.clk.Advance(time.Millisecond)
	if res := mustGet(t, fp.b, "p1", fp.src.Load); string(res.Value) != "p1@1" {
		t.Fatalf("after b's own invalidation: %q, want p1@1", res.Value)
	}
	settle(t, fp.b, "p1")
	fp.clk.Advance(time.Millisecond)
	fp.heardOnB(t)
	fp.wantFallback(t, "p1@1", "after both invalidations")
}

// A copy loaded during a gap, whose write to the shared tier is still on its
// way when the stream is heard again, is dropped from the hot tier like
// every copy from before, and read again from the shared tier once the
// write has landed: not loaded again.
func TestStreamHeardAgainDuringALoadsWrite(t *testing.T) {
	shared := inmem.New(nil)
	src := &source{}
	b := newListeningNS(t, holdfast.Options{Shared: shared}, hotEverywhere)
	shared.Deafen()
	thaw := shared.StallSets()
	if res := mustGetNoSettle(t, b, "p1", src.Load); res.Source != holdfast.SourceLoaded {
		t.Fatalf("first read from %v", res.Source)
	}
	shared.Hear()
	eventually(t, "the drop", func() bool { return b.Stats().Get("stream.gap_dropped") == 1 })
	thaw()
	settle(t, b, "p1")
	if res := mustGet(t, b, "p1", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("p1 from %v after the gap, want the shared tier", res.Source)
	}
	if n := b.Stats().Get("loads"); n != 1 {
		t.Fatalf("%d loads, want 1", n)
	}
	settle(t, b, "p1")
	if res := mustGet(t, b, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("p1 from %v once read again, want the hot tier", res.Source)
	}
}

// mustGetNoSettle is mustGet without waiting for the load's write.
func mustGetNoSettle(t *testing.T, ns *holdfast.Namespace, key string, l holdfast.Loader) holdfast.Result {
	t.Helper()
	res, err := ns.Get(context.Background(), key, l)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return res
}

// A load that another process's invalidation overtakes is not stored as
// current (it may have read the value the invalidation replaced), but its
// readers were served it: like a copy the invalidation finds in
// last-known-good, it stays there as a fallback for a failed load, within
// its stale-if-error window, and a later read whose load fails gets it
// rather than the error. So it does when the announcement is stamped
// before the load began (the announcing process's clock a second behind):
// it is still only a fallback, never taken for current while the shared
// tier is down.
func TestOvertakenLoadStaysAFallback(t *testing.T) {
	for _, skew := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprintf("clock ahead %v: a failed load gets it", skew), func(t *testing.T) {
			b, _, src, want := overtaken(t, skew)
			src.fail(errors.New("database down"))
			res, err := b.Get(context.Background(), "p1", src.Load)
			if err != nil {
				t.Fatalf("read with the database down: %v, want the value b was served, from last-known-good", err)
			}
			if string(res.Value) != want || !res.Stale() || res.Source != holdfast.SourceMemory {
				t.Fatalf("read with the database down: %q from %v (stale %v), want %q from memory, stale", res.Value, res.Source, res.Stale(), want)
			}
		})
		t.Run(fmt.Sprintf("clock ahead %v: not current while the shared tier is down", skew), func(t *testing.T) {
			b, shared, src, _ := overtaken(t, skew)
			shared.Fail(errors.New("shared tier down"))
			res, err := b.Get(context.Background(), "p1", src.Load)
			if err != nil {
				t.Fatal(err)
			}
			if res.Source != holdfast.SourceLoaded {
				t.Fatalf("read with the shared tier down from %v, want a load: the overtaken value is a fallback only", res.Source)
			}
		})
	}
}

// overtaken has b load p1 while a invalidates it, a's clock (and the
// shared tier's) skew behind b's, and returns b once its store was
// refused, with the value its reader was served.
func overtaken(t *testing.T, skew time.Duration) (b *holdfast.Namespace, shared *inmem.Tier, src *source, want string) {
	t.Helper()
	behind := fakeclock.New(t0)
	shared = inmem.New(behind.Now)
	src = &source{}
	want = src.update("p1")
	p := holdfast.Policy{TTL: time.Minute, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}}
	a := newListeningNS(t, holdfast.Options{Shared: shared, Clock: behind}, p)
	b = newListeningNS(t, holdfast.Options{Shared: shared, Clock: fakeclock.New(t0.Add(skew))}, p)

	read, release := make(chan struct{}), make(chan struct{})
	gated := func(ctx context.Context, key string) ([]byte, error) {
		v, err := src.Load(ctx, key)
		close(read)
		<-release
		return v, err
	}
	done := make(chan holdfast.Result, 1)
	go func() {
		res, err := b.Get(context.Background(), "p1", gated)
		if err != nil {
			t.Errorf("b's first read: %v", err)
		}
		done <- res
	}()
	<-read
	if err := a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to hear the invalidation", func() bool { return b.Stats().Get("invalidations.heard") == 1 })
	close(release)
	if res := <-done; string(res.Value) != want {
		t.Fatalf("b's first read %q, want %q", res.Value, want)
	}
	settle(t, b, "p1")
	if n := b.Stats().Get("dropped_stale_sets"); n != 1 {
		t.Fatalf("DroppedStaleSets %d, want 1: the load was not overtaken", n)
	}
	return b, shared, src, want
}
