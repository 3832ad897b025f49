package holdfast_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// busyTier is an inmem tier that is a tier.Leveler: Shed answers shed, and
// counts the keys it was asked about. The real one is package redis's
// (level.go), tested on a real Cluster there.
type busyTier struct {
	*inmem.Tier
	shed  atomic.Bool
	asked atomic.Int64
}

func (b *busyTier) Levels() bool { return true }

func (b *busyTier) Shed(key string) bool {
	b.asked.Add(1)
	return b.shed.Load()
}

// noHot keeps no key in the hot tier, so that every read past the first
// goes to the shared tier or, shed, to last-known-good.
var noHot = holdfast.Policy{TTL: time.Minute, SoftTTL: 30 * time.Second, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{MaxBytes: -1}}

// A read the tier sheds is answered from this process's last-known-good
// copy, within its soft time, without reading the shared tier; one the tier
// does not shed reads it as usual.
func TestBusyNodeReadAnsweredFromMemory(t *testing.T) {
	shared := &busyTier{Tier: inmem.New(nil)}
	ns := newListeningNS(t, holdfast.Options{Shared: shared}, noHot)
	src := &source{}
	want := src.update("p1")
	mustGet(t, ns, "p1", src.Load)
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("read not shed: from %v, want shared", res.Source)
	}
	if shared.asked.Load() != 1 {
		t.Fatalf("Shed asked %d times, want 1 (the second read; the first had no copy to answer with)", shared.asked.Load())
	}
	shared.shed.Store(true)
	gets := shared.Calls().Gets
	res := mustGet(t, ns, "p1", src.Load)
	if !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) || string(res.Value) != want || res.Stale() {
		t.Fatalf("shed read: %v %q stale %t, want memory-for-busy-node %q, fresh", res.Source, res.Value, res.Stale(), want)
	}
	if g := shared.Calls().Gets; g != gets {
		t.Fatalf("the shed read reached the shared tier (%d gets, %d before)", g, gets)
	}
	st := ns.Stats()
	if st.Get("memory_for_busy_node") != 1 || st.Get("capability.leveling") != 1 {
		t.Fatalf("memory_for_busy_node %d, capability.leveling %d; want 1, 1", st.Get("memory_for_busy_node"), st.Get("capability.leveling"))
	}
	// A key never read has nothing to answer with: Shed is not asked.
	asked := shared.asked.Load()
	mustGet(t, ns, "p2", src.Load)
	if shared.asked.Load() != asked {
		t.Fatal("Shed asked for a key with no copy in memory")
	}
}

// Only a copy as good as the tier's is served for a busy node: one that
// another process's invalidation demoted, one past its soft time, and one
// loaded before a gap in the invalidation stream (or during one) are read
// from the shared tier, busy or not.
func TestBusyNodeOnlyCurrentCopies(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := &busyTier{Tier: inmem.New(clk.Now)}
	shared.shed.Store(true)
	src := &source{}
	a := newListeningNS(t, holdfast.Options{Shared: shared, Clock: clk}, noHot)
	cb := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
	eventually(t, "the stream to be heard", func() bool { return cb.StreamHeard() })
	b := newNS(t, cb, "product", noHot)

	// Demoted by another process's invalidation.
	src.update("p1")
	mustGet(t, b, "p1", src.Load)
	if res := mustGet(t, b, "p1", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("before the invalidation: from %v, want memory-for-busy-node", res.Source)
	}
	want := src.update("p1")
	if err := a.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b to apply the invalidation", func() bool { return b.Stats().Get("invalidations.applied") == 1 })
	if res := mustGet(t, b, "p1", src.Load); res.Reason == holdfast.ReasonNodeBusy || string(res.Value) != want {
		t.Fatalf("after the invalidation: %v %q, want %q not from memory", res.Source, res.Value, want)
	}

	// Past its soft time, within its hard time: read from the tier, which
	// answers with its own copy, stale, and a refresh.
	mustGet(t, b, "p3", src.Load)
	clk.Advance(31 * time.Second)
	if res := mustGet(t, b, "p3", src.Load); !answered(res, holdfast.SourceShared, holdfast.ReasonRevalidating, true) {
		t.Fatalf("a copy past its soft time: from %v, want stale from the shared tier", res.Source)
	}
	settle(t, b, "p3")

	// Loaded before a gap in the stream: not served, during the gap nor
	// after it, until a read of the shared tier finds it current again; a
	// copy loaded after the stream is heard again is.
	mustGet(t, b, "p4", src.Load)
	if res := mustGet(t, b, "p4", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("p4 before the gap: from %v, want memory-for-busy-node", res.Source)
	}
	shared.Deafen()
	eventually(t, "b to notice the gap", func() bool { return !cb.StreamHeard() })
	if res := mustGet(t, b, "p4", src.Load); res.Reason == holdfast.ReasonNodeBusy {
		t.Fatal("served for a busy node while the stream was not heard")
	}
	clk.Advance(time.Millisecond)
	shared.Hear()
	eventually(t, "b to hear the stream again", func() bool { return cb.StreamHeard() })
	clk.Advance(time.Millisecond)
	if res := mustGet(t, b, "p4", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("a copy loaded before the gap: from %v, want shared", res.Source)
	}
	if res := mustGet(t, b, "p4", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("p4, found current in the shared tier after the gap: from %v, want memory-for-busy-node", res.Source)
	}
	clk.Advance(time.Millisecond)
	mustGet(t, b, "p5", src.Load)
	if res := mustGet(t, b, "p5", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("p5, loaded after the gap: from %v, want memory-for-busy-node", res.Source)
	}
}

// GetMany sheds the keys it holds current copies of and reads the rest in
// one batch.
func TestBusyNodeGetMany(t *testing.T) {
	shared := &busyTier{Tier: inmem.New(nil)}
	ns := newListeningNS(t, holdfast.Options{Shared: shared}, noHot)
	src := &source{}
	mustGet(t, ns, "p1", src.Load)
	mustGet(t, ns, "p2", src.Load)
	shared.shed.Store(true)
	many := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			v, err := src.Load(ctx, k)
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
	res, errs := ns.GetMany(context.Background(), []string{"p1", "p2", "p3"}, many)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	for i, want := range []holdfast.Reason{holdfast.ReasonNodeBusy, holdfast.ReasonNodeBusy, 0} {
		if res[i].Reason != want || res[i].Stale() {
			t.Fatalf("key %d from %v for %v (stale %v), want %v", i, res[i].Source, res[i].Reason, res[i].Stale(), want)
		}
	}
	for i, want := range []holdfast.Source{holdfast.SourceMemory, holdfast.SourceMemory, holdfast.SourceLoaded} {
		if res[i].Source != want {
			t.Fatalf("key %d from %v, want %v", i, res[i].Source, want)
		}
	}
	if n := ns.Stats().Get("memory_for_busy_node"); n != 2 {
		t.Fatalf("MemoryForBusyNode %d, want 2", n)
	}
}

// A key the hot tier would take, answered for a busy node from
// last-known-good, enters the hot tier as a shared-tier hit would have put
// it there: the next read is a hot-tier hit.
func TestBusyNodeHotKeyEntersHotTier(t *testing.T) {
	shared := &busyTier{Tier: inmem.New(nil)}
	var admit atomic.Bool
	p := holdfast.Policy{TTL: time.Minute, StaleIfError: time.Hour,
		Hot: holdfast.HotPolicy{Threshold: -1, TTL: time.Minute, Admit: func(string) bool { return admit.Load() }}}
	ns := newListeningNS(t, holdfast.Options{Shared: shared}, p)
	src := &source{}
	mustGet(t, ns, "p1", src.Load)
	shared.shed.Store(true)
	admit.Store(true)
	if res := mustGet(t, ns, "p1", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("shed read from %v, want memory-for-busy-node", res.Source)
	}
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("the next read from %v, want the hot tier", res.Source)
	}
}

// A copy answers for a busy node only within Hot.TTL of when it was found
// current, as a hot-tier copy would: a stream that breaks is noticed only
// after a while, and an invalidation lost meanwhile must not be served for
// as long as the node stays busy. A shared-tier hit of the same load finds
// it current again; a hot copy put for a busy node lives Hot.TTL from then,
// not from the read that put it.
func TestBusyNodeCopyAgesOutAtHotTTL(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := &busyTier{Tier: inmem.New(clk.Now)}
	var admit atomic.Bool
	p := holdfast.Policy{TTL: time.Minute, SoftTTL: 30 * time.Second, StaleIfError: time.Hour,
		Hot: holdfast.HotPolicy{Threshold: -1, TTL: 2 * time.Second, Admit: func(string) bool { return admit.Load() }}}
	ns := newListeningNS(t, holdfast.Options{Shared: shared, Clock: clk}, p)
	src := &source{}
	mustGet(t, ns, "p1", src.Load)
	shared.shed.Store(true)
	if res := mustGet(t, ns, "p1", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("just loaded: from %v, want memory-for-busy-node", res.Source)
	}
	clk.Advance(2 * time.Second)
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("found current Hot.TTL ago: from %v for %v, want shared", res.Source, res.Reason)
	}
	clk.Advance(1500 * time.Millisecond)
	admit.Store(true)
	if res := mustGet(t, ns, "p1", src.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonNodeBusy, false) {
		t.Fatalf("found current in the shared tier 1.5 s ago: from %v for %v, want memory-for-busy-node", res.Source, res.Reason)
	}
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceHot {
		t.Fatalf("after the busy-node answer: from %v, want its hot copy", res.Source)
	}
	clk.Advance(600 * time.Millisecond)
	if res := mustGet(t, ns, "p1", src.Load); res.Source != holdfast.SourceShared {
		t.Fatalf("2.1 s after it was found current: from %v for %v, want shared (the hot copy gone at 2 s)", res.Source, res.Reason)
	}
}
