package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// stampede is the coalescing experiment first run on Spring's cache: g
// goroutines released at once on one key that is in no cache, with a 200 ms
// loader and no load cap, so the figure is how many loads one burst causes.
// Naive cache-aside loads once per goroutine; coalescing loads once per
// process. The same burst with Redis down (Spring's cache: 16 loads for 16
// requests with every writer and sync setting) ends the run.
func stampede(o Options) Plan {
	const (
		loader = 200 * time.Millisecond
		reps   = 5
		small  = 16
		large  = 1000
	)
	// Not timed: scale does not shorten it. The axis is an estimate for the
	// progress bar and the chart.
	d := time.Duration(reps+2) * (loader + 100*time.Millisecond)
	p := map[string]any{
		"goroutines": small, "repetitions": reps, "goroutines_large": large,
		"loader_ms": ms(loader), "loader_cap": 0, "redis_timeout_ms": 100,
		"ttl_s": baseTTL.Seconds(), "redis_server": "standalone, fresh per mode",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	run := func(ctx context.Context, o Options, m Mode) (res ModeResult, err error) {
		srv, err := redistest.Launch(redistest.Options{})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, srv.Close()) }()
		src := NewSource(SourceConfig{Latency: loader})
		r, err := m.New(ctx, ReaderConfig{
			RedisAddrs: []string{srv.Addr()}, Load: src.Load,
			TTL: baseTTL, StaleIfError: baseStaleIfError, Timeout: 100 * time.Millisecond,
		})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, r.Close()) }()
		ops0, _ := CommandsProcessed(srv.Addr())

		// CPU time is measured over the bursts, the Redis-down one
		// included; the killed server's time after its last sample is lost.
		meter := startCPU([]*redistest.Process{srv})
		defer meter.stop()
		start := time.Now()
		src.Begin(start, 0, 0)
		rec := NewRecorder(0, 0)
		o.Progress.Begin(o.label(m), d)
		burst := func(key string, g int) (loads int64, err error) {
			before, _ := src.Calls()
			errs := make([]error, g)
			release := make(chan struct{})
			var wg sync.WaitGroup
			for i := range g {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-release
					t0 := time.Now()
					_, stale, err := r.Get(ctx, key)
					rec.Record(t0.Sub(start), time.Since(t0), classify(stale, err))
					errs[i] = err
					o.Progress.Add(1)
				}()
			}
			close(release)
			wg.Wait()
			after, _ := src.Calls()
			return after - before, errors.Join(errs...)
		}

		res.Extra = map[string]float64{}
		var total, worst int64
		for i := range reps {
			n, _ := burst(fmt.Sprintf("stampede:%d", i), small)
			total += n
			worst = max(worst, n)
		}
		res.Extra["loads_per_burst_16_mean"] = float64(total) / reps
		res.Extra["loads_per_burst_16_max"] = float64(worst)
		n, _ := burst("stampede:large", large)
		res.Extra["loads_burst_1000"] = float64(n)
		ops := opsSince(srv.Addr(), ops0)

		srv.Kill()
		n, _ = burst("stampede:redis-down", small)
		res.Extra["loads_burst_16_redis_down"] = float64(n)
		cpu := meter.stop()
		if err := ctx.Err(); err != nil {
			return res, err
		}

		res.Stats = rec.Overall()
		res.Window = rec.Window()
		res.LoaderCalls, _ = src.Calls()
		res.Series = rec.Seconds(secondsIn(time.Since(start)))
		for i, c := range src.CallsPerSecond() {
			if i < len(res.Series) {
				res.Series[i].LoaderCalls = c
			}
		}
		res.Nodes = []Node{{Addr: srv.Addr(), Role: "primary", Ops: ops}}
		for k, v := range r.Stats() {
			res.Extra[k] = v
		}
		cpu.addTo(&res)
		return res, nil
	}
	return Plan{Params: p, Duration: d, RunMode: run,
		Figure: "loads per burst of 16 on one empty key (Spring's cache: 16 with its default Redis writer, 1 coalesced); of 1,000; of 16 with Redis down"}
}
