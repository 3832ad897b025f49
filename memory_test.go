package holdfast_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/memtest"
)

// A namespace whose hot tier and last-known-good are full of small values
// holds about its byte budgets in live heap, not twice them: each entry is
// charged its key, node and map share, not only its bytes. (Charging 128
// bytes an entry for all of that, a namespace of 16-byte values held 1.76×
// its budgets.)
func TestBudgetsHoldInMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 6 MiB of stores")
	}
	const hot, lkg = 2 << 20, 4 << 20
	base := memtest.LiveHeap()
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns := newNS(t, c, "search", holdfast.Policy{
		TTL:                time.Hour,
		StaleIfError:       time.Hour,
		LastKnownGoodBytes: lkg,
		Hot:                holdfast.HotPolicy{MaxBytes: hot},
	})
	if err := memtest.FillNamespace(ns, 16); err != nil {
		t.Fatal(err)
	}
	heap := memtest.LiveHeap() - base
	st := ns.Stats()
	runtime.KeepAlive(ns)
	ratio := float64(heap) / (hot + lkg)
	hotFill := float64(st.Get("hot.bytes")) / hot
	t.Logf("%d hot entries, %d last-known-good: heap/budget %.2f, hot tier fill %.3f", st.Get("hot.entries"), st.Get("last_known_good.entries"), ratio, hotFill)
	// Measured 0.92: the hot tier's entries share their bytes with
	// last-known-good's, which both count.
	if ratio > 1.25 {
		t.Errorf("live heap is %.2f× the budgets, want at most 1.25", ratio)
	}
	if hotFill < 0.9 {
		t.Errorf("the hot tier counts %.3f of its budget as held, want at least 0.9", hotFill)
	}
	// Both stores charge an entry alike, so last-known-good holds about
	// twice the hot tier's entries.
	if r := float64(st.Get("last_known_good.entries")) / float64(st.Get("hot.entries")); r < 1.8 || r > 2.2 {
		t.Errorf("last-known-good holds %.2f× the hot tier's entries for twice its budget", r)
	}
}
