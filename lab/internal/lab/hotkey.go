package lab

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The hot-key scenarios run on a real Cluster (3 primaries + 3 replicas):
// a key lives on one primary, so a key everyone reads makes that primary
// the cluster's bottleneck, and a process's memory is the one place that
// takes the load off Redis altogether (in a production deployment, a local
// cache of hot keys took ~35% of normal traffic, up to 70% in spikes).
//
//   - hot-key: a viral product's spike. 2,000 requests a second for 20 s,
//     80% of them on one key and the rest uniform over 10,000 keys. Figures:
//     the hot tier's share of every read (≥ 0.70) and the Redis commands per
//     primary, max over mean (≤ 1.25), beside the naive client's.
//   - hot-key-smear: the same spike with holdfast's hot tier off, so every
//     read reaches Redis: what smearing alone does to the primaries.
//   - hot-zipf: 2,000 requests a second over 100,000 keys with Zipf (s =
//     1.1) popularity, on the library's defaults. Figures: the hot tier's
//     share of reads (≥ 0.35) and CPU per request beside the naive client's.
//   - hot-zipf-detected: the same with the hot tier holding only the keys
//     found hot (Hot.Threshold 1,000 reads a minute). Figures: the hot
//     tier's share of reads (≥ 0.35) and the share of keys it held at the
//     end (≤ 0.01).

const (
	hotRate     = 2000.0
	hotShare    = 0.8
	hotKeyCount = 10000
	zipfKeys    = 100000
	zipfS       = 1.1
	hotTTL      = time.Minute
)

func hotSpike(smearOnly bool) func(o Options) Plan {
	return func(o Options) Plan {
		d := o.length(shortDuration)
		rng := rand.New(rand.NewPCG(6, 6))
		const hot = "product:viral"
		sched := ConstantRate(hotRate, d, func(int) string {
			if rng.Float64() < hotShare {
				return hot
			}
			return fmt.Sprintf("product:%d", rng.IntN(hotKeyCount))
		})
		t := hotTraffic(sched, d, smearOnly, hotKeyCount)
		p := hotParams(d, len(sched), smearOnly)
		p["hot_key"], p["hot_key_share"], p["keys"] = hot, hotShare, hotKeyCount
		p["fault"] = "spike: hot_key_share of the requests on hot_key for the whole run, the rest uniform over keys"
		figure := "hot_tier_share ≥ 0.70 and node_ops_max_over_mean ≤ 1.25 over the primaries, beside the naive client's"
		if smearOnly {
			figure = "node_ops_max_over_mean over the primaries with the hot tier off: smearing alone"
		}
		return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode, Figure: figure}
	}
}

func hotZipf(detected bool) func(o Options) Plan {
	return func(o Options) Plan {
		d := o.length(shortDuration)
		rng := rand.New(rand.NewPCG(7, 7))
		z := rand.NewZipf(rng, zipfS, 1, zipfKeys-1)
		sched := ConstantRate(hotRate, d, func(int) string { return fmt.Sprintf("product:%d", z.Uint64()) })
		t := hotTraffic(sched, d, false, zipfKeys)
		p := hotParams(d, len(sched), false)
		p["keys"], p["zipf_s"] = zipfKeys, zipfS
		p["fault"] = "none: Zipf popularity over keys for the whole run"
		figure := "hot_tier_share ≥ 0.35 (a production local cache of hot keys took ~35% of normal traffic) and cpu_ms_per_1k_client ≤ 0.9× naive's"
		if detected {
			// A hot tier of the keys found hot, as that production cache
			// was: the detector's rate, which the library uses with a
			// shared tier without an invalidation stream.
			hotOnlyFound(&t.Reader, p)
			figure = "hot_tier_share ≥ 0.35 with hot_tier_key_share ≤ 0.01: the share a hot tier of the few keys found hot takes"
		}
		return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode, Figure: figure}
	}
}

// hotTraffic runs sched on a Cluster and adds the hot-key figures. keys is
// how many distinct keys the schedule draws from.
func hotTraffic(sched []Request, d time.Duration, smearOnly bool, keys int) Traffic {
	return Traffic{
		Schedule: sched,
		Duration: d,
		Window:   [2]time.Duration{0, d},
		Cluster:  true,
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader:   ReaderConfig{TTL: hotTTL, StaleIfError: 30 * time.Minute, Timeout: 100 * time.Millisecond, HotDisabled: smearOnly},
		Extra: func(f *Fixture, r *ModeResult) {
			r.Extra["hot_tier_share"] = 0
			if r.Requests > 0 {
				r.Extra["hot_tier_share"] = r.Extra["hf_hot_hits"] / float64(r.Requests)
			}
			r.Extra["hot_tier_keys"] = r.Extra["hf_hot_entries"]
			r.Extra["hot_tier_key_share"] = r.Extra["hf_hot_entries"] / float64(keys)
			var sum, top float64
			n := 0
			for _, nd := range r.Nodes {
				if nd.Role == "primary" && nd.Ops >= 0 {
					sum += float64(nd.Ops)
					top = max(top, float64(nd.Ops))
					n++
				}
			}
			if n > 0 && sum > 0 {
				r.Extra["node_ops_max_over_mean"] = top / (sum / float64(n))
			}
		},
	}
}

// detectedHotThreshold is the library's Hot.Threshold with a shared tier
// without an invalidation stream: 1,000 reads a minute.
const detectedHotThreshold = 1000.0 / 60

// hotOnlyFound gives holdfast a hot tier of the keys found hot
// (detectedHotThreshold) instead of every key read, and says so in p.
func hotOnlyFound(r *ReaderConfig, p map[string]any) {
	r.HotThreshold = detectedHotThreshold
	p["holdfast_config"] = strings.Replace(p["holdfast_config"].(string), "hot tier on for every key, 16 MiB", "hot tier on for the keys found hot, Hot.Threshold 1,000 reads a minute", 1)
}

func hotParams(d time.Duration, scheduled int, smearOnly bool) map[string]any {
	cfg := holdfastConfig + "; keys found hot above 1,000 reads a minute (2 s half-life) smeared over 5 copies (at most one per primary)"
	if smearOnly {
		cfg = "library defaults with the hot tier off (every read goes to Redis); hot keys smeared over 5 copies (at most one per primary); Redis tier: 50 ms read budget, random reads over primary + ready replicas"
	}
	return map[string]any{
		"rate_per_s": hotRate, "loader_ms": ms(baseLoader), "loader_cap": baseCap,
		"loader_queue": 0, "ttl_s": hotTTL.Seconds(), "redis_timeout_ms": 100,
		"duration_s": d.Seconds(), "fault_start_s": 0, "fault_end_s": d.Seconds(),
		"redis_server": "cluster of 3 primaries + 3 replicas, fresh per mode",
		"latency_from": "scheduled start (open model)", "requests_scheduled": scheduled,
		"naive_redis_client": "rueidis, no client-side cache, no retries (reads go to primaries)",
		"holdfast_config":    cfg,
	}
}
