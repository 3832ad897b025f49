package lab

import (
	"math"
	"strings"
	"testing"
	"time"
)

// hot-key-warm-start's figures from hand-made reads.
func TestWarmStartFigures(t *testing.T) {
	const ms = time.Millisecond
	win := [2]time.Duration{1000 * ms, 3000 * ms}
	// reads returns one read every 100 ms in [from, to), the first hot of
	// every ten in the window's first second local, then hot of the rest.
	reads := func(from, to time.Duration, localFirst, localRest int) []warmRead {
		var out []warmRead
		for at := from; at < to; at += 100 * ms {
			i := int((at % time.Second) / (100 * ms))
			local := i < localRest
			if at >= win[0] && at < win[0]+time.Second {
				local = i < localFirst
			}
			out = append(out, warmRead{At: at, Local: local, Out: OK})
		}
		return out
	}
	older := [][]warmRead{
		reads(0, 4000*ms, 8, 8),  // 0.8 in the window and its first second
		reads(0, 4000*ms, 6, 6),  // 0.6
		reads(0, 1000*ms, 10, 0), // nothing in the window: left out
	}
	late := reads(win[0], 4000*ms, 7, 7) // 0.7
	control := reads(win[0], 4000*ms, 0, 7)
	got := warmStartFigures(older, late, control, win)
	want := map[string]float64{
		"older_hot_share": 0.7, "older_hot_share_min": 0.6, "older_hot_share_max": 0.8,
		"older_hot_share_first_s":      0.7,
		"warm_start_hot_share":         0.7,
		"warm_start_hot_share_first_s": 0.7,
		"warm_start_hot_share_ratio":   1,
		"cold_start_hot_share":         0.35,
		"cold_start_hot_share_first_s": 0,
		"cold_start_hot_share_ratio":   0.5,
		"warm_start_window_reads":      20,
		"cold_start_window_reads":      20,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("figures %v, want only %v", got, want)
	}

	// No local read among the older processes: no ratio.
	got = warmStartFigures([][]warmRead{reads(0, 4000*ms, 0, 0)}, late, control, win)
	if _, ok := got["warm_start_hot_share_ratio"]; ok || got["older_hot_share"] != 0 {
		t.Errorf("older share 0: %v", got)
	}
}

// The late process (and its control) takes a quarter of the requests from
// the late start, none before; the older ones a third, then a quarter each.
func TestWarmStartSchedule(t *testing.T) {
	d := 2 * time.Second
	late, win := warmStartWindows(d)
	if late != time.Second || win != [2]time.Duration{time.Second, 1500 * time.Millisecond} {
		t.Fatalf("windows of %v: late %v, window %v", d, late, win)
	}
	if late, win := warmStartWindows(warmDuration); late != 10*time.Second || win[1] != 15*time.Second {
		t.Fatalf("windows of the default: late %v, window %v", late, win)
	}
	var before, after [warmOlder + 1]int
	hot := 0
	sched := warmStartSchedule(d)
	for i, q := range sched {
		if q.At < late {
			before[warmStartOwner(i, q.At, late)]++
		} else {
			after[warmStartOwner(i, q.At, late)]++
		}
		if strings.HasPrefix(q.Key, "product:hot:") {
			hot++
		}
	}
	if before[warmOlder] != 0 || before[0] != 667 || after[warmOlder] != 500 || after[0] != 500 {
		t.Errorf("requests before the late start %v, after %v", before, after)
	}
	if share := float64(hot) / float64(len(sched)); share < 0.77 || share > 0.83 {
		t.Errorf("hot keys' share %v, want ~%v", share, hotShare)
	}
}
