package lab

import (
	"testing"
	"time"
)

// update-propagation's figures from a hand-made run of two readers.
func TestAnalyzePropagation(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	const ms = time.Millisecond
	freeze := [2]time.Duration{1000 * ms, 2000 * ms}
	read := func(start, end time.Duration, key int, ver int64, local bool) propRead {
		return propRead{At: start, Start: at(start), End: at(end), Key: key, Ver: ver, Local: local, Out: OK}
	}
	probe := func(start, end time.Duration, key int, probed, ver int64) propProbe {
		return propProbe{For: probed, propRead: propRead{Start: at(start), End: at(end), Key: key, Ver: ver, Out: OK}}
	}
	in := propRunData{
		Start: t0, End: at(3000 * ms), FreezeAt: at(freeze[0]), ThawAt: at(freeze[1]),
		Before: [2]time.Duration{0, freeze[0]}, Freeze: freeze, MaxUnheard: 15 * time.Second, Keys: 2,
		Updates: []propUpdate{
			// Outside the freeze: key 0's version 1, Invalidate returned at 100 ms.
			{Key: 0, Ver: 1, At: 95 * ms, Bumped: at(95 * ms), Done: at(100 * ms)},
			// During the freeze: key 1's version 1.
			{Key: 1, Ver: 1, At: 1010 * ms, Bumped: at(1010 * ms), Done: at(1020 * ms), Err: true},
		},
		Reads: [][]propRead{
			{
				read(90*ms, 90*ms, 0, 0, true),   // before the update
				read(101*ms, 101*ms, 0, 0, true), // old, 1 ms after: within the bound
				read(105*ms, 110*ms, 0, 1, false),
				read(250*ms, 250*ms, 0, 0, true),   // old 150 ms after: past the bound
				read(1500*ms, 1500*ms, 1, 0, true), // old in the freeze, within its bound
				read(2030*ms, 2030*ms, 1, 1, false),
				{At: 1600 * ms, Start: at(1600 * ms), End: at(1700 * ms), Key: 1, Ver: -1, Out: Failed},
			},
			{
				read(105*ms, 105*ms, 0, 1, false),
				read(2005*ms, 2005*ms, 1, 0, true), // old after the thaw
				read(2040*ms, 2050*ms, 1, 1, false),
			},
		},
		// Probe reads of key 0's version 1: reader 0 drops its copy 2 ms
		// after Invalidate returned, reader 1 before it did. A failed probe
		// read in the freeze counts in no figure.
		Probes: [][]propProbe{
			{
				probe(96*ms, 96*ms, 0, 1, 0), probe(101*ms, 101*ms, 0, 1, 0),
				probe(102*ms, 114*ms, 0, 1, 1),
				{For: 1, propRead: propRead{Start: at(1500 * ms), End: at(1600 * ms), Key: 1, Ver: -1, Out: Failed}},
			},
			{probe(96*ms, 96*ms, 0, 1, 0), probe(97*ms, 110*ms, 0, 1, 1)},
		},
		Flags: []map[string][]flagEdge{
			{"stream": {{At: at(0), On: true}, {At: at(1500 * ms), On: false}, {At: at(2040 * ms), On: true}},
				"breaker": {{At: at(0), On: true}, {At: at(1200 * ms), On: false}}},
			{"stream": {{At: at(0), On: true}}, "breaker": {{At: at(0), On: true}}},
		},
		WriterFlags: map[string][]flagEdge{"breaker": {{At: at(0), On: true}, {At: at(1100 * ms), On: false}, {At: at(2500 * ms), On: true}}},
	}
	got := analyzePropagation(in)
	want := map[string]float64{
		"updates": 2, "updates_during_freeze": 1, "writer_errors": 1,
		// The probes: reader 0 serves version 1 from 2 ms after Invalidate
		// returned.
		"propagation_p50_ms": 2, "propagation_p99_ms": 2, "propagation_max_ms": 2,
		"propagation_updates": 1, "propagation_probe_unmeasured": 0,
		// The schedule's reads: reader 0 served version 1 10 ms after
		// Invalidate returned, reader 1 5 ms after; reader 0 still served
		// version 0 150 ms after.
		"propagation_next_read_p50_ms": 10, "propagation_next_read_p99_ms": 10, "propagation_next_read_max_ms": 10,
		"propagation_last_old_p50_ms": 150, "propagation_last_old_max_ms": 150,
		"propagation_next_read_updates": 1, "propagation_next_read_unmeasured": 0,
		"next_read_new_share":  0.5,
		"old_reads_past_bound": 1, "old_reads_past_bound_max_age_ms": 150, "old_reads_past_bound_unheard": 0,
		"old_reads_during_freeze": 1,
		"errors":                  1, "errors_during_freeze": 1,
		"hot_share_before_freeze": 3.0 / 5, "hot_share_during_freeze": 1.0 / 2,
		// Reader 1 served the freeze's version 50 ms after the thaw, after an
		// old read begun 5 ms after it.
		"converge_after_thaw_ms": 50, "converge_after_thaw_last_old_ms": 5, "converge_unmeasured": 0,
		// Reader 0's breaker never closed again: the time to the end.
		"stream_heard_after_thaw_ms": 40, "breaker_closed_after_thaw_ms": 1000,
		"writer_breaker_closed_after_thaw_ms": 500,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}

	// A probe read that serves the old version again 200 ms after
	// Invalidate returned: the reader serves the new one only from the
	// next probe read, and the old read is past the bound.
	in.Probes[1] = append(in.Probes[1], probe(300*ms, 300*ms, 0, 1, 0), probe(301*ms, 313*ms, 0, 1, 1))
	got = analyzePropagation(in)
	if got["propagation_max_ms"] != 201 || got["old_reads_past_bound"] != 2 || got["errors"] != 1 {
		t.Errorf("old probe read: propagation_max_ms %v, old_reads_past_bound %v, errors %v; want 201, 2, 1",
			got["propagation_max_ms"], got["old_reads_past_bound"], got["errors"])
	}
	// A reader whose probes never served the new version: the scheduled
	// reads' upper bound stands in.
	in.Probes[1] = in.Probes[1][:1]
	got = analyzePropagation(in)
	if got["propagation_max_ms"] != 10 || got["propagation_probe_unmeasured"] != 1 {
		t.Errorf("never probed new: propagation_max_ms %v, probe_unmeasured %v; want 10, 1", got["propagation_max_ms"], got["propagation_probe_unmeasured"])
	}
	in.Probes = nil

	// A reader that never serves the freeze's version: converged at the
	// earliest by the end of the run.
	in.Reads[1] = in.Reads[1][:2]
	got = analyzePropagation(in)
	if got["converge_after_thaw_ms"] != 1000 || got["converge_unmeasured"] != 1 {
		t.Errorf("never served: converge_after_thaw_ms %v, unmeasured %v; want 1000, 1", got["converge_after_thaw_ms"], got["converge_unmeasured"])
	}
}

// An old read past 100 ms falls under the outage bound, not the heard one,
// when the writer's tier had to queue the update's invalidation (its
// breaker open) or the reader did not hear the stream when it was made;
// otherwise it is past the bound.
func TestAnalyzePropagationOutageBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	const ms = time.Millisecond
	read := func(start time.Duration, key int, ver int64) propRead {
		return propRead{At: start, Start: at(start), End: at(start), Key: key, Ver: ver, Local: true, Out: OK}
	}
	in := propRunData{
		Start: t0, End: at(4000 * ms), FreezeAt: at(1000 * ms), ThawAt: at(2000 * ms),
		Before: [2]time.Duration{0, 1000 * ms}, Freeze: [2]time.Duration{1000 * ms, 2000 * ms}, MaxUnheard: 15 * time.Second, Keys: 3,
		Updates: []propUpdate{
			// After the thaw, while the writer's breaker is still open.
			{Key: 0, Ver: 1, At: 2100 * ms, Bumped: at(2095 * ms), Done: at(2100 * ms)},
			// After the thaw, while reader 0 does not hear the stream.
			{Key: 1, Ver: 1, At: 2700 * ms, Bumped: at(2695 * ms), Done: at(2700 * ms)},
			// After the thaw, everyone heard: 100 ms.
			{Key: 2, Ver: 1, At: 3000 * ms, Bumped: at(2995 * ms), Done: at(3000 * ms)},
		},
		Reads: [][]propRead{{
			read(2300*ms, 0, 0), read(2600*ms, 0, 1), // 200 ms old: writer queued
			read(2900*ms, 1, 0), read(3100*ms, 1, 1), // 200 ms old: reader unheard
			read(3200*ms, 2, 0), read(3300*ms, 2, 1), // 200 ms old: past the bound
		}},
		Flags: []map[string][]flagEdge{{"stream": {{At: at(0), On: true}, {At: at(2650 * ms), On: false}, {At: at(2950 * ms), On: true}}}},
		WriterFlags: map[string][]flagEdge{"breaker": {{At: at(0), On: true}, {At: at(1100 * ms), On: false}, {At: at(2500 * ms), On: true}},
			"nodes": {{At: at(0), On: true}}},
	}
	got := analyzePropagation(in)
	for k, w := range map[string]float64{"old_reads_past_bound": 1, "old_reads_outage_bound": 2, "old_reads_past_bound_unheard": 0} {
		if got[k] != w {
			t.Errorf("%s = %v, want %v", k, got[k], w)
		}
	}
}
