package lab

import (
	"context"
	"math/rand/v2"
	"sort"
	"time"
)

// autocomplete is a stock-search autocomplete as a production service ran it:
// users type names, the client debounces keystrokes (a prefix is searched
// only once the user paused for the debounce time, or finished), each search
// is cache-aside over a 15 ms database search (that service's database search
// averaged 15.43 ms), and Redis stops in the middle of the run. Typing
// sessions arrive as a Poisson process; the schedule is fixed in advance from
// a seed, so it is still an open model.
func autocomplete(o Options) Plan {
	const (
		sessionsPerSec = 12.0
		debounce       = 150 * time.Millisecond
		minGap         = 60 * time.Millisecond
		maxGap         = 300 * time.Millisecond
		minPrefix      = 2
		search         = 15 * time.Millisecond
		ttl            = time.Minute
	)
	d := o.length(shortDuration)
	w := middleThird(d)
	names := stockNames(300)
	rng := rand.New(rand.NewPCG(1, 1))

	var sched []Request
	keystrokes := 0
	// Bounded: the arrival process ends at d, and the session count is
	// capped far above its mean as a guard.
	maxSessions := int(sessionsPerSec*d.Seconds())*10 + 10
	for at, n := time.Duration(0), 0; n < maxSessions; n++ {
		at += time.Duration(rng.ExpFloat64() / sessionsPerSec * float64(time.Second))
		if at >= d {
			break
		}
		// Popular names are typed more often: squaring a uniform draw
		// skews it towards the head of the list.
		u := rng.Float64()
		name := names[int(u*u*float64(len(names)))]
		t := at
		for i := 1; i <= len(name); i++ {
			keystrokes++
			gap := minGap + time.Duration(rng.Int64N(int64(maxGap-minGap)))
			last := i == len(name)
			if i >= minPrefix && (last || gap >= debounce) {
				if when := t + debounce; when < d {
					sched = append(sched, Request{At: when, Key: "ac:" + name[:i]})
				}
			}
			t += gap
		}
	}
	sort.SliceStable(sched, func(i, j int) bool { return sched[i].At < sched[j].At })

	t := Traffic{
		Schedule: sched,
		Duration: d,
		Window:   w,
		Source:   SourceConfig{Latency: search, Cap: baseCap},
		Reader:   ReaderConfig{TTL: ttl, StaleIfError: 10 * time.Minute, Timeout: 100 * time.Millisecond},
		// Frozen, not killed: with Redis down, that service's requests each
		// "waited for get and set to fail", which is what an unresponsive
		// Redis does; a killed one on loopback refuses connections at once
		// and hides that cost.
		Faults: []Fault{
			{At: w[0], Name: "freeze", Do: func(_ context.Context, f *Fixture) error { return f.Redis.Freeze() }},
			{At: w[1], Name: "thaw", Do: func(_ context.Context, f *Fixture) error { return f.Redis.Thaw() }},
		},
		Extra: func(f *Fixture, r *ModeResult) {
			r.Extra["keystrokes"] = float64(keystrokes)
			r.Extra["searches_sent"] = float64(len(sched))
		},
	}
	p := map[string]any{
		"sessions_per_s": sessionsPerSec, "names": len(names), "debounce_ms": ms(debounce),
		"keystroke_gap_ms": []float64{ms(minGap), ms(maxGap)}, "min_prefix": minPrefix,
		"search_ms": ms(search), "loader_cap": baseCap, "loader_queue": 0, "ttl_s": ttl.Seconds(),
		"stale_if_error_s": (10 * time.Minute).Seconds(), "redis_timeout_ms": 100,
		"duration_s": d.Seconds(), "fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"fault":              "SIGSTOP redis-server, SIGCONT at the end of the window",
		"requests_scheduled": len(sched), "latency_from": "scheduled start (open model)",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: t.RunMode,
		Figure: "Redis-down window: p95, p99, errors (the production service, with a 100 ms timeout and a breaker: p95 1.81 s, p99 30.78 s)"}
}

// stockNames returns n distinct made-up names over a small alphabet, so that
// prefixes are shared between names as they are between real stock names.
func stockNames(n int) []string {
	const alpha = "abcdeiklmnorst"
	rng := rand.New(rand.NewPCG(7, 7))
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		b := make([]byte, 4+rng.IntN(6))
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		if s := string(b); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
