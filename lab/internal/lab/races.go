package lab

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hitDuringLoad measures a flaw of Spring's locking Redis cache writer:
// one lock per cache name, so a hit waited 923–948 ms behind another key's
// 1 s load. Here hits on ten warm keys run at 200 req/s while, in the middle
// third, a new cold key whose load takes 1 s is read every second, so a slow
// load is always in flight. The hits' window percentiles are the figure; the
// slow reads are recorded aside (aside_*).
func hitDuringLoad(o Options) Plan {
	const slow = time.Second
	d := o.length(15 * time.Second)
	w := middleThird(d)
	sched := ConstantRate(baseRate, d, uniformKeys("product:warm", 10))
	for _, r := range ConstantRate(1, w[1]-w[0], func(i int) string { return fmt.Sprintf("product:slow:%d", i) }) {
		r.At += w[0]
		sched = append(sched, r)
	}
	sortSlice(sched)
	isSlow := func(key string) bool { return strings.HasPrefix(key, "product:slow:") }
	t := Traffic{
		Schedule: sched,
		Duration: d,
		Window:   w,
		Source: SourceConfig{Latency: baseLoader, Cap: baseCap, LatencyFor: func(key string) (time.Duration, bool) {
			return slow, isSlow(key)
		}},
		Reader: ReaderConfig{TTL: time.Minute, StaleIfError: baseStaleIfError, Timeout: 100 * time.Millisecond},
		Aside:  isSlow,
	}
	p := map[string]any{
		"rate_per_s": baseRate, "keys": 10, "slow_load_ms": ms(slow), "slow_reads_per_s": 1,
		"loader_ms": ms(baseLoader), "loader_cap": baseCap, "loader_queue": 0, "ttl_s": 60,
		"redis_timeout_ms": 100, "duration_s": d.Seconds(),
		"fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"fault":        "one new cold key a second whose load takes slow_load_ms",
		"latency_from": "scheduled start (open model)", "redis_server": "standalone, fresh per mode",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: t.RunMode,
		Figure: "window p99 of the hits while 1 s loads of other keys run (Spring's locking writer: 923–948 ms); slow reads in aside_*"}
}

// staleSetRace is cache-aside's classic race: a load reads version n, a
// writer commits n+1 and deletes the cached key, then the load's SET puts n
// back, where it stays until its TTL. In the middle third a writer updates
// a random key every 250 ms (so that loads happen), and every other load
// that starts in the window has a write land while its value is on the way
// back. A read is a violation when it returns a version older than one
// committed more than 200 ms before the read began (time enough for any
// invalidation to land); violations are counted to the end of the run,
// since a stale SET lasts until the TTL.
//
// With restart, Redis is also killed in the middle of the window and
// restarted empty 1 s later (stale-set-race-restart): the writes of the
// outage are queued and replayed, and holdfast refills Redis from memory
// (tier.Refiller) with the keys it holds current, which must not bring an
// old version back either.
func staleSetRace(o Options) Plan { return staleSetRaceWith(o, false) }

func staleSetRaceRestart(o Options) Plan { return staleSetRaceWith(o, true) }

func staleSetRaceWith(o Options, restart bool) Plan {
	const (
		keys   = 20
		settle = 200 * time.Millisecond
		every  = 250 * time.Millisecond
	)
	d := o.length(shortDuration) // the figure is a count of violations
	w := middleThird(d)
	key := uniformKeys("product", keys)
	var (
		violations, racing, writes atomic.Int64
		wg                         sync.WaitGroup // racing writers, owned by the run
		loads                      atomic.Int64
	)
	write := func(ctx context.Context, f *Fixture, k string) error {
		f.Source.Update(k)
		writes.Add(1)
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return f.Reader.Invalidate(ictx, k)
	}
	var faults []Fault
	for at, i := w[0], 0; at < w[1]; at, i = at+every, i+1 {
		k := fmt.Sprintf("product:%d", (i*7)%keys)
		faults = append(faults, Fault{At: at, Name: "write " + k, Do: func(ctx context.Context, f *Fixture) error {
			// An invalidation that fails is a lost delete, part of what
			// is measured; it does not stop the run.
			_ = write(ctx, f, k)
			return nil
		}})
	}
	kill := (w[0] + w[1]) / 2
	if restart {
		faults = append(faults,
			Fault{At: kill, Name: "kill", Do: func(_ context.Context, f *Fixture) error { f.Redis.Kill(); return nil }},
			Fault{At: kill + (w[1]-w[0])/7, Name: "restart", Do: func(_ context.Context, f *Fixture) error { return f.Redis.Restart() }})
	}
	t := Traffic{
		Schedule: ConstantRate(baseRate, d, key),
		Duration: d,
		Window:   w,
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader:   ReaderConfig{TTL: time.Minute, Timeout: 100 * time.Millisecond},
		Faults:   faults,
		Setup: func(f *Fixture) error {
			violations.Store(0)
			racing.Store(0)
			writes.Store(0)
			loads.Store(0)
			f.Source.BeforeRead(func(k string) {
				at := time.Since(f.Start)
				if at < w[0] || at >= w[1] || loads.Add(1)%2 == 0 {
					return
				}
				racing.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = write(context.Background(), f, k)
				}()
			})
			return nil
		},
		// The source's version when the read began, and how long it had
		// been committed then.
		Before: func(f *Fixture, req Request) any {
			n, at := f.Source.Version(req.Key)
			return committed{n: n, age: time.Since(at)}
		},
		Observe: func(f *Fixture, req Request, before any, v []byte, err error) {
			cur := before.(committed)
			if err == nil && ValueVersion(v) < cur.n && cur.age > settle {
				violations.Add(1)
			}
		},
		Extra: func(f *Fixture, r *ModeResult) {
			wg.Wait()
			r.Extra["violations"] = float64(violations.Load())
			r.Extra["racing_writes"] = float64(racing.Load())
			r.Extra["writes"] = float64(writes.Load())
		},
	}
	p := map[string]any{
		"rate_per_s": baseRate, "keys": keys, "loader_ms": ms(baseLoader), "loader_cap": baseCap,
		"ttl_s": 60, "redis_timeout_ms": 100, "duration_s": d.Seconds(),
		"fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"fault":       "writes (update + invalidate) every 250 ms, and one during every other load",
		"violation":   "a read returning a version older than one committed > 200 ms before it began",
		"write_every": every.String(), "settle_ms": ms(settle),
		"latency_from": "scheduled start (open model)", "redis_server": "standalone, fresh per mode",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	fig := "violations: reads of a version older than one committed > 200 ms earlier (cache-aside's stale SET lasts until its TTL)"
	var marks []Mark
	if restart {
		p["restart"] = fmt.Sprintf("SIGKILL redis-server at %.3g s, restarted empty at %.3g s", kill.Seconds(), (kill + (w[1]-w[0])/7).Seconds())
		marks = []Mark{{At: kill, Label: "kill"}, {At: kill + (w[1]-w[0])/7, Label: "restart empty"}}
		fig += "; Redis killed and restarted empty in the window"
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: t.RunMode, Marks: marks, Figure: fig}
}

type committed struct {
	n   int64
	age time.Duration
}
