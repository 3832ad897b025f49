package holdfast_test

import (
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// answered reports whether res came from src for why, Stale as stale.
func answered(res holdfast.Result, src holdfast.Source, why holdfast.Reason, stale bool) bool {
	return res.Source == src && res.Reason == why && res.Stale() == stale
}

// The names are what logs, Cache-Status headers and metric labels show.
func TestSourceAndReasonNames(t *testing.T) {
	var got []string
	for s := range holdfast.SourceMemory + 2 {
		got = append(got, s.String())
	}
	for r := range holdfast.ReasonOverloaded + 2 {
		got = append(got, r.String())
	}
	want := "none hot shared loaded memory Source(5) " +
		"none revalidating tier-down tier-slow peer-loading source-slow source-failed overloaded Reason(8)"
	if s := strings.Join(got, " "); s != want {
		t.Fatalf("names %q\nwant  %q", s, want)
	}
}

// Past its soft time with the shared tier failing, a last-known-good value
// still says why it came from memory, and is stale while its refresh runs.
func TestTierDownPastSoftIsStale(t *testing.T) {
	clk := fakeclock.New(t0)
	shared := inmem.New(clk.Now)
	c := newCache(t, holdfast.Options{Shared: shared, Clock: clk})
	ns := newNS(t, c, "product", holdfast.Policy{SoftTTL: time.Second, TTL: 10 * time.Second, Hot: holdfast.HotPolicy{MaxBytes: -1}, SlowReadGrace: time.Second})
	l := &countingLoader{}
	mustGet(t, ns, "p1", l.Load)
	settle(t, ns, "p1")
	shared.Fail(inmem.ErrInjected)
	clk.Advance(2 * time.Second)
	if res := mustGet(t, ns, "p1", l.Load); !answered(res, holdfast.SourceMemory, holdfast.ReasonTierDown, true) || string(res.Value) != "v1:p1" {
		t.Fatalf("%q from %v for %v (stale %v); want v1:p1 from memory, tier down, stale", res.Value, res.Source, res.Reason, res.Stale())
	}
}
