package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// The timed scenarios share one load: 200 req/s over 100 keys, a 12 ms loader
// capped at 10 concurrent loads with no queue (like a product service's
// per-pod semaphore: a refused load is a 503 at once), 20 s per mode with a
// 10 s fault in the middle (db faults and the shorter scenarios: 20 s with
// the middle third). Keys are drawn from a fixed seed, so every mode
// sees the same schedule.
const (
	baseRate   = 200.0
	baseKeys   = 100
	baseLoader = 12 * time.Millisecond
	baseCap    = 10
	// baseDuration is the length of the scenarios whose fault must outlast
	// the TTL: the middle half (10 s, twice the TTL) is the fault, with 5 s
	// of traffic on either side.
	baseDuration = 20 * time.Second
	// shortDuration is for scenarios whose figure does not depend on a 10 s
	// fault window, so that the whole suite runs within 10 minutes.
	shortDuration = 20 * time.Second
	// A value is fresh for 5 s (the stock TTL of a production product
	// service), so keys expire and reload during every fault window; holdfast
	// may serve it up to 30 s past that when Redis or the source fails.
	baseTTL          = 5 * time.Second
	baseStaleIfError = 30 * time.Second
)

func init() {
	Register(Scenario{Name: "redis-freeze", Summary: "Redis frozen with SIGSTOP for 10 s in the middle of a 20 s run.", Plan: redisFault("freeze")})
	Register(Scenario{Name: "redis-kill", Summary: "Redis killed with SIGKILL for 10 s in the middle of a 20 s run, then restarted empty.", Plan: redisFault("kill")})
	Register(Scenario{Name: "redis-kill-small-lkg", Summary: "redis-kill over 2,000 keys of Zipf popularity, last-known-good holding about a tenth of them: database loads in the outage.", Plan: redisKillSmallLKG})
	Register(Scenario{Name: "redis-fail-during-put", Summary: "A cold key's first load kills Redis before the SET (in Spring's cache this ran the loader twice for one request); Redis restarted empty at the end of the window.", Plan: failDuringPut})
	Register(Scenario{Name: "db-slow", Summary: "The source's latency goes from 12 ms to 400 ms for the middle third.", Plan: dbFault("slow")})
	Register(Scenario{Name: "db-down", Summary: "Every load fails for the middle third.", Plan: dbFault("down")})
	Register(Scenario{Name: "stampede", Summary: "16 goroutines on one empty key with a 200 ms loader, 5 times (Spring's cache with its default Redis writer loaded 16 times); 1,000 goroutines once; 16 with Redis down.", Plan: stampede})
	Register(Scenario{Name: "hot-key", Summary: "A spike on a 3+3 Cluster: 2,000 req/s for 20 s, 80% on one key, the rest uniform over 10,000 keys: hot_tier_share, node_ops_max_over_mean.", Plan: hotSpike(false)})
	Register(Scenario{Name: "hot-key-smear", Summary: "The hot-key spike with holdfast's hot tier off: node_ops_max_over_mean from smearing alone (naive: see hot-key, the same run).", OnlyModes: []string{"holdfast"}, Plan: hotSpike(true)})
	Register(Scenario{Name: "hot-zipf", Summary: "2,000 req/s over 100,000 keys with Zipf (s = 1.1) popularity on a 3+3 Cluster, library defaults: hot_tier_share, cpu_ms_per_1k_client.", Plan: hotZipf(false)})
	Register(Scenario{Name: "hot-zipf-detected", Summary: "hot-zipf with the hot tier holding only the keys found hot (1,000 reads a minute): hot_tier_share, hot_tier_key_share (naive: see hot-zipf, the same run).", OnlyModes: []string{"holdfast"}, Plan: hotZipf(true)})
	Register(Scenario{Name: "hit-during-load", Summary: "Hits on warm keys while 1 s loads of other keys run (Spring's locking Redis writer takes one lock per cache name).", Plan: hitDuringLoad})
	Register(Scenario{Name: "stale-set-race", Summary: "Writes (update + invalidate) racing loads: a late SET must not put an old version back (violations).", Plan: staleSetRace})
	Register(Scenario{Name: "stale-set-race-restart", Summary: "stale-set-race with Redis killed in the middle of the writes and restarted empty about 1 s later: the outage's writes replayed, Redis refilled from memory (violations).", Plan: staleSetRaceRestart})
	Register(Scenario{Name: "cross-process-stampede", Summary: "4 OS processes × 250 goroutines on one cold key, 3 times (Spring's locking writer loaded once across two JVMs).", Plan: crossProcessStampede})
	Register(Scenario{Name: "autocomplete", Summary: "Bursts of typing, debounced on the client, over a 15 ms search; Redis frozen for the middle third.", Plan: autocomplete})

	Register(Scenario{Name: "node-freeze", Summary: "One primary of a 3+3 Cluster frozen with SIGSTOP for 10 s under 300 req/s over 3,000 keys: first_ejection_ms, healthy_keys_p99_ratio.", Plan: nodeFreeze})
	Register(Scenario{Name: "update-propagation", Summary: "4 reader processes and a writer on a 3+3 Cluster: 2,000 req/s over 1,000 Zipf keys, 50 updates/s to the 10 most popular, the whole Cluster frozen for the middle 10 s of 40: propagation_p99_ms, old_reads_past_bound, hot shares through the freeze, converge_after_thaw_ms.", Plan: updatePropagation})
	Register(Scenario{Name: "hot-key-warm-start", Summary: "3 reader processes with Hot.Share on a 3+3 Cluster under 2,000 req/s, 80% on 10 hot keys, the rest uniform over 10,000; a 4th process started 10 s in, and a control without warm start: warm_start_hot_share_ratio, cold_start_hot_share_ratio over its first 5 s.", Plan: hotKeyWarmStart})
	Register(Scenario{Name: "grey-node", Summary: "One primary of a 3+3 Cluster slow and lossy (30 ms ± 10 ms each way, 2% loss) for 20 s, then partitioned for 10 s, under 300 req/s over 3,000 keys, in a network namespace of the lab's own: each phase's p99 and errors, ejection_ms, failover_ms.", OwnNetwork: true, Plan: greyNode})
	Register(Scenario{Name: "fleet-loss", Summary: "A 30+30 Cluster at 3,000 req/s over 100,000 Zipf keys loses 12 nodes (3 hosts: 6 primaries, 6 replicas) to SIGSTOP for 30 s of 45: window p95/p99, first_ejection_ms, last_ejection_ms, return_to_service_ms_max, node_reads_max_over_mean.", Plan: fleetLoss})
	Register(Scenario{Name: "replica-resync", Summary: "A replica of a 3+3 Cluster restarted empty while its primary holds 200,000 keys: unready_replica_reads.", Plan: replicaResync})
}

// holdfastConfig says how the holdfast mode is set up (see NewHoldfast).
const holdfastConfig = "library defaults (hot tier on for every key, 16 MiB; Redis tier: 50 ms read budget, 100 ms write timeout, breaker on) with soft TTL 0.8×TTL, the scenario's TTL and stale-if-error, load limit = loader cap"

func baseParams(d time.Duration, w [2]time.Duration) map[string]any {
	return map[string]any{
		"rate_per_s":         baseRate,
		"keys":               baseKeys,
		"loader_ms":          ms(baseLoader),
		"loader_cap":         baseCap,
		"loader_queue":       0,
		"ttl_s":              baseTTL.Seconds(),
		"stale_if_error_s":   baseStaleIfError.Seconds(),
		"redis_timeout_ms":   100,
		"duration_s":         d.Seconds(),
		"fault_start_s":      w[0].Seconds(),
		"fault_end_s":        w[1].Seconds(),
		"latency_from":       "scheduled start (open model)",
		"max_in_flight":      2000,
		"redis_server":       "standalone, fresh per mode",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// middleHalf is the fault window of the baseDuration scenarios: [d/4, 3d/4].
func middleHalf(d time.Duration) [2]time.Duration {
	return [2]time.Duration{(d / 4).Round(time.Millisecond), (3 * d / 4).Round(time.Millisecond)}
}

func middleThird(d time.Duration) [2]time.Duration {
	// Rounded to the millisecond so that tables and params read 0.667 s,
	// not 0.666666666 s.
	return [2]time.Duration{(d / 3).Round(time.Millisecond), (2 * d / 3).Round(time.Millisecond)}
}

// uniformKeys draws keys uniformly from n, with a fixed seed.
func uniformKeys(prefix string, n int) func(int) string {
	rng := rand.New(rand.NewPCG(8, uint64(n)))
	return func(int) string { return fmt.Sprintf("%s:%d", prefix, rng.IntN(n)) }
}

func baseTraffic(d time.Duration) Traffic {
	w := middleThird(d)
	return Traffic{
		Schedule: ConstantRate(baseRate, d, uniformKeys("product", baseKeys)),
		Duration: d,
		Window:   w,
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader:   ReaderConfig{TTL: baseTTL, StaleIfError: baseStaleIfError, Timeout: 100 * time.Millisecond},
	}
}

func redisFault(kind string) func(o Options) Plan {
	return func(o Options) Plan {
		d := o.length(baseDuration)
		t := baseTraffic(d)
		t.Window = middleHalf(d)
		p := baseParams(d, t.Window)
		// The target: loader calls during an outage grow with keys, not
		// traffic: at most keys × (1 + outage / hard TTL).
		t.Extra = func(f *Fixture, r *ModeResult) {
			out := t.Window[1] - t.Window[0]
			r.Extra["window_loader_bound"] = float64(baseKeys) * (1 + float64(out)/float64(baseTTL))
		}
		switch kind {
		case "freeze":
			p["fault"] = "SIGSTOP redis-server, SIGCONT at the end of the window"
			t.Faults = []Fault{
				{At: t.Window[0], Name: "freeze", Do: func(_ context.Context, f *Fixture) error { return f.Redis.Freeze() }},
				{At: t.Window[1], Name: "thaw", Do: func(_ context.Context, f *Fixture) error { return f.Redis.Thaw() }},
			}
			return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode,
				Figure: "frozen window: holdfast p50 ≤ 2 ms, p99 ≤ 60 ms, 0 errors; loader calls ≤ keys × (1 + outage / TTL)"}
		default:
			p["fault"] = "SIGKILL redis-server, restarted empty at the end of the window"
			t.Faults = []Fault{
				{At: t.Window[0], Name: "kill", Do: func(_ context.Context, f *Fixture) error { f.Redis.Kill(); return nil }},
				{At: t.Window[1], Name: "restart", Do: func(ctx context.Context, f *Fixture) error { return f.Redis.Restart() }},
			}
			return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode,
				Figure: "killed window: holdfast p99 ≤ 20 ms, 0 errors; loader calls ≤ keys × (1 + outage / TTL)"}
		}
	}
}

// Keys and last-known-good of redis-kill-small-lkg: the store holds about
// 80 of the 2,000 keys (an entry of the lab's values costs about 800 bytes
// in it), so which keys it keeps decides how many reads of the outage the
// database answers.
const (
	smallLKGKeys  = 2000
	smallLKGZipfS = 1.1
	smallLKGBytes = 64 << 10
)

// redisKillSmallLKG is redis-kill with a last-known-good store smaller than
// the keys read, as a process whose store is sized below its working set
// runs: every read of the outage whose key the store let go is a load. The
// hot tier holds only the keys found hot: by default it would hold every
// key read, and 16 MiB holds this whole working set, so nothing would be
// evicted and the figure would say nothing of which keys a store keeps.
func redisKillSmallLKG(o Options) Plan {
	d := o.length(baseDuration)
	rng := rand.New(rand.NewPCG(9, 9))
	z := rand.NewZipf(rng, smallLKGZipfS, 1, smallLKGKeys-1)
	t := baseTraffic(d)
	t.Schedule = ConstantRate(baseRate, d, func(int) string { return fmt.Sprintf("product:%d", z.Uint64()) })
	t.Window = middleHalf(d)
	t.Reader.LastKnownGoodBytes = smallLKGBytes
	t.Faults = []Fault{
		{At: t.Window[0], Name: "kill", Do: func(_ context.Context, f *Fixture) error { f.Redis.Kill(); return nil }},
		{At: t.Window[1], Name: "restart", Do: func(ctx context.Context, f *Fixture) error { return f.Redis.Restart() }},
	}
	t.Extra = func(f *Fixture, r *ModeResult) {
		r.Extra["outage_loads"] = float64(r.Window.LoaderCalls)
		r.Extra["outage_reads"] = float64(r.Window.Requests)
	}
	p := baseParams(d, t.Window)
	p["keys"], p["zipf_s"], p["last_known_good_bytes"] = smallLKGKeys, smallLKGZipfS, smallLKGBytes
	hotOnlyFound(&t.Reader, p)
	p["fault"] = "SIGKILL redis-server, restarted empty at the end of the window"
	return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode,
		Figure: "outage_loads: database loads in the killed window, with last-known-good below the working set (fewer is better)"}
}

// failDuringPut: every request reads one key; at the window's start the
// traffic moves to a cold key, and the first load of that key kills Redis
// right after the value is loaded, so its SET fails (in Spring's cache, "a
// Redis failure after the load, during the put, made the loader run twice
// for one request"). Redis comes back empty at the end of the window.
func failDuringPut(o Options) Plan {
	// 10 s, so that the window (3.3 s) ends before the cold key's soft time
	// (4 s): any second load in it is the double load, not a refresh.
	d := o.length(10 * time.Second)
	t := baseTraffic(d)
	w := t.Window
	t.Schedule = ConstantRate(baseRate, d, func(i int) string { return "product:warm" })
	for i := range t.Schedule {
		if t.Schedule[i].At >= w[0] {
			t.Schedule[i].Key = "product:cold"
		}
	}
	t.Setup = func(f *Fixture) error {
		// Once: concurrent first loads of the cold key all wait for the one
		// kill, so none of their SETs can reach the old process.
		var once sync.Once
		f.Source.AfterLoad(func(key string) {
			if key == "product:cold" {
				once.Do(f.Redis.Kill)
			}
		})
		return nil
	}
	t.Faults = []Fault{
		{At: w[1], Name: "restart", Do: func(ctx context.Context, f *Fixture) error { return f.Redis.Restart() }},
	}
	t.Extra = func(f *Fixture, r *ModeResult) {
		r.Extra["cold_key_loads"] = float64(r.Window.LoaderCalls)
	}
	p := baseParams(d, w)
	p["keys"] = 1
	p["fault"] = "traffic moves to a cold key at fault_start_s; its first load SIGKILLs redis-server before the SET; restarted empty at fault_end_s"
	return Plan{Params: p, Duration: d, Window: w, RunMode: t.RunMode,
		Figure: "cold_key_loads: loads of the one cold key while Redis is down (holdfast: 1)"}
}

func dbFault(kind string) func(o Options) Plan {
	return func(o Options) Plan {
		// 20 s: the figure is errors and tail in the fault window, which a
		// 6.7 s window shows as well as a 10 s one, and -scenario all must
		// stay within 10 minutes.
		d := o.length(shortDuration)
		t := baseTraffic(d)
		p := baseParams(d, t.Window)
		var fig string
		switch kind {
		case "slow":
			const slow = 400 * time.Millisecond
			p["fault"] = "source latency 12 ms → 400 ms"
			p["slow_loader_ms"] = ms(slow)
			t.Faults = []Fault{
				{At: t.Window[0], Name: "slow", Do: func(_ context.Context, f *Fixture) error { f.Source.SetLatency(slow); return nil }},
				{At: t.Window[1], Name: "fast", Do: func(_ context.Context, f *Fixture) error { f.Source.SetLatency(baseLoader); return nil }},
			}
			fig = "slow window: p99 and rejected (holdfast serves stale while one refresh waits)"
		default:
			p["fault"] = "every load fails (after its 12 ms)"
			t.Faults = []Fault{
				{At: t.Window[0], Name: "down", Do: func(_ context.Context, f *Fixture) error { f.Source.SetDown(true); return nil }},
				{At: t.Window[1], Name: "up", Do: func(_ context.Context, f *Fixture) error { f.Source.SetDown(false); return nil }},
			}
			fig = "down window: errors (holdfast serves last-known-good values within stale_if_error_s)"
		}
		return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode, Figure: fig}
	}
}
