package holdfast_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
)

// What a newcomer meets with the defaults, each a promise of the docs.

// The zero Policy with a shared tier: while the tier is down, reads of a
// key this process has loaded are answered from memory until its TTL, so an
// outage costs one load per key per TTL, not one per read.
func TestZeroPolicyOutageCostsOneLoadPerKey(t *testing.T) {
	shared := inmem.New(nil)
	c := newCache(t, holdfast.Options{Shared: shared})
	ns := newNS(t, c, "profiles", holdfast.Policy{})
	l := &countingLoader{}
	mustGet(t, ns, "x", l.Load)
	shared.Fail(inmem.ErrInjected)
	for i := range 5 {
		res, err := ns.Get(context.Background(), "x", l.Load)
		if err != nil || string(res.Value) != "v1:x" {
			t.Fatalf("read %d with the tier down: %q, %v", i, res.Value, err)
		}
	}
	if got := l.calls.Load(); got != 1 {
		t.Fatalf("loader calls = %d for 6 reads of one key, want 1", got)
	}
}

// Closed means closed on every path: a hot-tier hit, a batch read and an
// invalidation all return ErrClosed.
func TestCloseMeansClosedOnEveryPath(t *testing.T) {
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNS(t, c, "profiles", holdfast.Policy{})
	mustGet(t, ns, "x", ((&countingLoader{}).Load)) // now in the hot tier
	c.Close()
	if _, err := ns.Get(context.Background(), "x", ((&countingLoader{}).Load)); !errors.Is(err, holdfast.ErrClosed) {
		t.Errorf("hot-tier hit after Close: err = %v, want ErrClosed", err)
	}
	if _, errs := ns.GetMany(context.Background(), []string{"x"}, nil); errs == nil || !errors.Is(errs[0], holdfast.ErrClosed) {
		t.Errorf("GetMany after Close: errs = %v, want ErrClosed", errs)
	}
	if err := ns.Invalidate(context.Background(), "x"); !errors.Is(err, holdfast.ErrClosed) {
		t.Errorf("Invalidate after Close: err = %v, want ErrClosed", err)
	}
}

// Readers that waited for another read's load say so: SourceLoaded answers
// without Collapsed count loads.
func TestJoinedReadersAreNotLoads(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	ns := newNS(t, c, "profiles", holdfast.Policy{})
	l := &countingLoader{gate: make(chan struct{})}
	const readers = 10
	type how struct {
		src       holdfast.Source
		collapsed bool
	}
	hows := make([]how, readers)
	var wg sync.WaitGroup
	for i := range readers {
		wg.Go(func() {
			res, _ := ns.Get(context.Background(), "x", l.Load)
			hows[i] = how{res.Source, res.Collapsed}
		})
	}
	eventually(t, "every reader to join", func() bool { return ns.Stats().Get("coalesced") == readers-1 })
	close(l.gate)
	wg.Wait()
	count := map[how]int{}
	for _, h := range hows {
		count[h]++
	}
	if count[how{holdfast.SourceLoaded, false}] != 1 || count[how{holdfast.SourceLoaded, true}] != readers-1 {
		t.Fatalf("answers %v: want 1 loaded and %d loaded and collapsed", count, readers-1)
	}
	if s := holdfast.Source(0).String(); s != "none" {
		t.Fatalf("the zero Source prints %q", s)
	}
	if s := holdfast.Reason(0).String(); s != "none" {
		t.Fatalf("the zero Reason prints %q", s)
	}
}

// Errors read once: no repeated "holdfast:" prefix; a nil loader is named.
func TestErrorsReadOnce(t *testing.T) {
	c := newCache(t, holdfast.Options{MaxConcurrentLoads: 1, LoadWait: -1})
	ns := newNS(t, c, "profiles", holdfast.Policy{})
	gate := make(chan struct{})
	defer close(gate)
	go ns.Get(context.Background(), "busy", (&countingLoader{gate: gate}).Load)
	eventually(t, "the slot to be taken", func() bool { return c.LoadsInFlight() == 1 })
	_, err := ns.Get(context.Background(), "x", ((&countingLoader{}).Load))
	if !errors.Is(err, holdfast.ErrOverloaded) || strings.Count(err.Error(), "holdfast:") != 1 {
		t.Fatalf("err = %q, want ErrOverloaded with one holdfast: prefix", err)
	}
	_, err = ns.Get(context.Background(), "y", nil)
	if err == nil || !strings.Contains(err.Error(), "nil loader") {
		t.Fatalf("nil loader: err = %v", err)
	}
	if st := ns.Stats(); st.Get("load.errors") != 0 {
		t.Fatalf("a nil loader was counted as a load error (a panic): %+v", st)
	}
}

// Typed offers the batch read, Stats and multi-key invalidation too.
func TestTypedBatch(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	type profile struct{ Name string }
	ty := holdfast.NewTyped[profile](newNS(t, c, "profiles", holdfast.Policy{}), nil)
	load := func(ctx context.Context, keys []string) (map[string]profile, error) {
		out := map[string]profile{}
		for _, k := range keys {
			if k != "missing" {
				out[k] = profile{Name: "n-" + k}
			}
		}
		return out, nil
	}
	vals, _, errs := ty.GetMany(context.Background(), []string{"a", "missing", "b"}, load)
	if vals[0].Name != "n-a" || vals[2].Name != "n-b" || errs == nil || !errors.Is(errs[1], holdfast.ErrNotFound) || errs[0] != nil {
		t.Fatalf("vals %+v errs %v", vals, errs)
	}
	if err := ty.Invalidate(context.Background(), "a", "b"); err != nil {
		t.Fatal(err)
	}
	if st := ty.Namespace().Stats(); st.Get("invalidations") != 2 || st.Get("loads") != 1 || st.Get("load.keys") != 3 {
		t.Fatalf("stats %+v: want 2 invalidations, 1 loader call for 3 keys", st)
	}
}
