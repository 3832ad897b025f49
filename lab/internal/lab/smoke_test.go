package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// redis-freeze in both modes, scaled down to 2 s per mode, against a real
// redis-server: the scenario runs end to end and its figures are sane.
func TestSmokeRedisFreeze(t *testing.T) {
	s, ok := Lookup("redis-freeze")
	if !ok {
		t.Fatal("redis-freeze not registered")
	}
	rep, err := Run(context.Background(), s, Options{Duration: 2 * time.Second}, Modes)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Missing) > 0 {
		t.Fatalf("modes missing: %v", rep.Missing)
	}
	for _, m := range rep.Modes {
		// 200 req/s for 2 s; the window is the middle half.
		if m.Requests != 400 || m.Window.Requests < 197 || m.Window.Requests > 203 {
			t.Errorf("%s: requests %d, window %d; want 400, ~200", m.Mode, m.Requests, m.Window.Requests)
		}
		if m.LoaderCalls == 0 || len(m.Series) < 2 || m.Nodes[0].Ops <= 0 {
			t.Errorf("%s: loader calls %d, series %d, nodes %+v", m.Mode, m.LoaderCalls, len(m.Series), m.Nodes)
		}
		if m.Mode == "naive" && (m.Window.P50 < 50 || m.Extra["redis_get_errors"] == 0) {
			// Frozen Redis: a naive read waits on its GET until the 100 ms
			// timeout, or until rueidis drops the silent connection (its
			// write timeout, also 100 ms, can fire a little earlier for
			// reads queued behind the first): far above a hit's 1 ms.
			t.Errorf("naive window p50 %v ms, get errors %v; want ≥ 50 ms and some", m.Window.P50, m.Extra["redis_get_errors"])
		}
	}
	dir := t.TempDir()
	if _, err := Write(dir, rep); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "redis-freeze.svg"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wellFormed(t, f)
}

// Every runnable scenario of -scenario all, every mode, shortened: each
// must run without error. Scenarios that declare a missing part must say
// so.
func TestSmokeAllScenarios(t *testing.T) {
	for _, s := range Scenarios() {
		if s.Name == "redis-freeze" || s.Separate {
			continue // above; run by name only
		}
		t.Run(s.Name, func(t *testing.T) {
			// fleet-loss's 60 servers a mode, started beside the others'
			// runs, starve them past their timeouts: it runs alone,
			// before the parallel ones start.
			if s.Name != "fleet-loss" {
				t.Parallel()
			}
			rep, err := Run(context.Background(), s, Options{Duration: 1500 * time.Millisecond}, Modes)
			if s.OwnNetwork && !InOwnNetwork() {
				// Run in a namespace of its own by TestGreyNodeSmoke; here
				// every mode must say what it lacks and run nothing.
				if err != nil || len(rep.Modes) > 0 || len(rep.Missing) != len(Modes) {
					t.Fatalf("outside its own network: err %v, modes %d, missing %v", err, len(rep.Modes), rep.Missing)
				}
				return
			}
			if s.Missing != "" {
				if !IsMissing(err) {
					t.Fatalf("declared missing %q, Run returned %v", s.Missing, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Missing) > 0 {
				t.Fatalf("modes missing: %v", rep.Missing)
			}
			want := len(Modes)
			if len(s.OnlyModes) > 0 {
				want = len(s.OnlyModes)
			}
			if len(rep.Modes) != want {
				t.Errorf("%d modes ran, want %d", len(rep.Modes), want)
			}
			for _, m := range rep.Modes {
				if m.Requests == 0 {
					t.Errorf("%s: no request", m.Mode)
				}
				for _, k := range smokeFigures[s.Name] {
					if _, ok := m.Extra[k]; !ok {
						t.Errorf("%s: no %s in %v", m.Mode, k, m.Extra)
					}
				}
				// Shortened, the restarted replica is up for well under a
				// second of the naive mode's traffic on a busy machine (maybe
				// none of it), so only holdfast's count is checked here;
				// TestNaiveRoutedReadsRestartedReplica checks that the naive
				// mode's reads reach a replica restarted empty and miss.
				if s.Name == "replica-resync" && m.Mode == "holdfast" && m.Extra["unready_replica_reads"] != 0 {
					t.Errorf("%s: %v reads answered by the replica before it was ready", m.Mode, m.Extra["unready_replica_reads"])
				}
			}
		})
	}
}

// smokeFigures are extra figures a scenario must report in every mode, even
// shortened.
var smokeFigures = map[string][]string{
	"node-freeze": {"healthy_keys_p99_ratio"},
	"fleet-loss":  {"cluster_nodes", "nodes_lost", "failovers", "node_reads_max_over_mean", "node_reads_max_over_mean_floor"},
	"replica-resync": {"unready_replica_reads", "unready_replica_server_reads",
		"misses_during_resync", "misses_before_resync", "loads_during_resync", "loads_before_resync"},
	// Shortened, the older processes have not shared their hot keys yet
	// (every 5 s) when the late one starts, nor found them hot, maybe: the
	// ratios need a share of theirs above 0.
	"hot-key-warm-start": {"warm_start_hot_share", "cold_start_hot_share", "older_hot_share",
		"warm_start_keys", "warm_start_bytes", "warm_start_window_reads", "cold_start_window_reads"},
	"update-propagation": {"propagation_p50_ms", "propagation_p99_ms", "propagation_max_ms",
		"old_reads_past_bound", "old_reads_during_freeze", "errors", "hot_share_before_freeze",
		"hot_share_during_freeze", "converge_after_thaw_ms"},
}
