package holdfast_test

import (
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
)

// A key first read while the stream is lost and the tier failing is
// loaded then; when the tier is back empty its copy is written back, as
// the one loaded before the outage is, and neither loads again. (One
// loaded after the last heartbeat but before the stream was lost loads:
// TestRefillOnlyCopiesTheStreamVouchesFor.)
func TestRefillCopyLoadedInTheGap(t *testing.T) {
	w := newRefillWorld(t, 1, nil)
	w.get(t, 0, "before")
	w.heartbeat(t)
	w.restartEmpty(t, func() {
		w.clk.Advance(100 * time.Millisecond)
		if res := w.get(t, 0, "during"); res.Source != holdfast.SourceLoaded {
			t.Fatalf("first read in the outage from %v (%v), want a load", res.Source, res.Reason)
		}
	})
	refills, loads := w.stat(0, "refills"), w.stat(0, "loads")
	for _, k := range []string{"before", "during"} {
		if res := w.get(t, 0, k); res.Source != holdfast.SourceMemory || res.Reason != 0 {
			t.Errorf("%s from %v (%v), want written back from memory", k, res.Source, res.Reason)
		}
	}
	if r, l := w.stat(0, "refills")-refills, w.stat(0, "loads")-loads; r != 2 || l != 0 {
		t.Fatalf("refills %d, loads %d; want both copies written back and no load", r, l)
	}
	w.holds(t, "during", "during@0", false)
}
