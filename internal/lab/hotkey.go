package lab

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// hotKey is seed 002's hot-key problem on a real Cluster (3 primaries + 3
// replicas): popularity follows a Zipf law, so a few keys take much of the
// traffic and their slots' nodes take it all; in the middle third, a spike
// of as many requests again lands on one key. The figures: the share of
// reads the in-process hot tier answered (seed 002: ~35% normally, up to 70%
// in spikes) and how uneven the primaries' command counts are.
func hotKey(o Options) Plan {
	const (
		rate      = 400.0
		spikeRate = 400.0
		keys      = 1000
		zipfS     = 1.1
		ttl       = time.Minute
	)
	d := o.length(baseDuration)
	w := middleThird(d)
	rng := rand.New(rand.NewPCG(4, 4))
	z := rand.NewZipf(rng, zipfS, 1, keys-1)
	sched := ConstantRate(rate, d, func(int) string { return fmt.Sprintf("product:%d", z.Uint64()) })
	// One key, lukewarm before the spike: its slot's primary takes the whole
	// spike in naive mode (seed 004: a key always maps to one node).
	spikeKeys := []string{"product:500"}
	for _, r := range ConstantRate(spikeRate, w[1]-w[0], func(i int) string { return spikeKeys[i%len(spikeKeys)] }) {
		r.At += w[0]
		sched = append(sched, r)
	}
	sortSlice(sched)

	t := Traffic{
		Schedule: sched,
		Duration: d,
		Window:   w,
		Cluster:  true,
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader:   ReaderConfig{TTL: ttl, StaleIfError: 30 * time.Minute, Timeout: 100 * time.Millisecond},
		Extra: func(f *Fixture, r *ModeResult) {
			r.Extra["hot_tier_share"] = 0
			if r.Requests > 0 {
				r.Extra["hot_tier_share"] = r.Extra["hf_hot_hits"] / float64(r.Requests)
			}
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
	p := map[string]any{
		"rate_per_s": rate, "spike_rate_per_s": spikeRate, "spike_keys": spikeKeys,
		"keys": keys, "zipf_s": zipfS, "loader_ms": ms(baseLoader), "loader_cap": baseCap,
		"loader_queue": 0, "ttl_s": ttl.Seconds(), "redis_timeout_ms": 100,
		"duration_s": d.Seconds(), "fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"fault":        "spike: spike_rate_per_s more requests over spike_keys",
		"redis_server": "cluster of 3 primaries + 3 replicas, fresh per mode; reads go to primaries",
		"latency_from": "scheduled start (open model)", "requests_scheduled": len(sched),
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: t.RunMode,
		Figure: "hot_tier_share (seed 002: ~35% normally, up to 70% in spikes) and node_ops_max_over_mean over the primaries"}
}
