package redis_test

// The Redis-outage figures, measured with real redis-server processes: an
// open-model load (constant arrival rate, each request its own goroutine) on
// holdfast over the Redis tier and, in the same test at the same time, on a
// naive cache-aside over rueidis, while Redis is frozen (SIGSTOP) or killed.
//
// By default the tests run a scaled-down version (3 s outage, hard TTL
// 1.5 s so that every value still expires twice during it, wide margins for
// a loaded 2-core machine under the race detector). The full version — 10 s
// outage, hard TTL 5 s and the exact target bounds — runs with
//
//	go test -run 'TestFigure' -v ./redis -holdfast.full
//	HOLDFAST_FULL=1 go test -run 'TestFigure' -v ./redis
//
// Both print a table of the figures (t.Logf), so -v shows them.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

var fullFigures = flag.Bool("holdfast.full", false, "run the figure tests at full size (10 s outages, target bounds); HOLDFAST_FULL=1 does the same")

// figureConfig is one size of the figure tests.
type figureConfig struct {
	rate      int           // requests per second, per system
	keys      int           // distinct keys, chosen uniformly at random
	loadCost  time.Duration // the loader's latency
	loadCap   int           // concurrent loads: the Cache's MaxConcurrentLoads, the naive side's pool
	valueSize int

	warm, outage, after time.Duration // phases: before the failure, during it, after recovery

	ttl, staleIfError time.Duration

	// Bounds on holdfast in the outage window.
	frozenP50, frozenP99, killedP99 time.Duration
}

// The setting: 200 req/s over 100 keys, a 12 ms loader capped at 10
// concurrent loads, a 10 s outage. The policy is a product service's stock:
// hard TTL 5 s, no stale-while-revalidate window (SoftTTL = TTL, so the
// loader bound keys × (1 + outage/TTL) is exact: a key is loaded once per
// hard TTL), and StaleIfError 30 s: it is what gives the namespace its
// last-known-good store (none without it), whose values are served until
// their hard time while Redis is down — so an outage costs one load per key
// per TTL, not one per read — and past it whenever a load is rejected by the
// limiter or fails. 30 s covers the outage with room; stock shown on a page
// is a hint (orders reserve in the database), so half a minute of staleness
// during an outage is acceptable where an error page is not.
var fullFigure = figureConfig{
	rate: 200, keys: 100, loadCost: 12 * time.Millisecond, loadCap: 10, valueSize: 512,
	warm: 3 * time.Second, outage: 10 * time.Second, after: 3 * time.Second,
	ttl: 5 * time.Second, staleIfError: 30 * time.Second,
	frozenP50: 2 * time.Millisecond, frozenP99: 60 * time.Millisecond, killedP99: 20 * time.Millisecond,
}

// The default, scaled down in time only: the same traffic, a 3 s outage and
// a 1.5 s TTL (outage/TTL = 2 as in the full run), and bounds wide enough for
// the race detector on 2 busy cores. They still separate holdfast from the
// naive cache-aside by an order of magnitude.
var smallFigure = figureConfig{
	rate: 200, keys: 100, loadCost: 12 * time.Millisecond, loadCap: 10, valueSize: 512,
	warm: time.Second, outage: 3 * time.Second, after: time.Second,
	ttl: 1500 * time.Millisecond, staleIfError: 30 * time.Second,
	frozenP50: 5 * time.Millisecond, frozenP99: 150 * time.Millisecond, killedP99: 60 * time.Millisecond,
}

func figure() (figureConfig, string) {
	if *fullFigures || os.Getenv("HOLDFAST_FULL") == "1" {
		return fullFigure, "full"
	}
	return smallFigure, "scaled-down"
}

// figureDB is the source of truth: loadCost per call, at most loadCap calls
// at once (a caller over the cap waits for a slot, like a connection pool),
// and the start time of every call recorded.
type figureDB struct {
	cfg   figureConfig
	epoch time.Time
	pool  chan struct{}

	mu     sync.Mutex
	starts []time.Duration // since epoch
}

func newFigureDB(cfg figureConfig) *figureDB {
	return &figureDB{cfg: cfg, epoch: time.Now(), pool: make(chan struct{}, cfg.loadCap)}
}

// reset forgets the calls so far and counts later ones from epoch.
func (d *figureDB) reset(epoch time.Time) {
	d.mu.Lock()
	d.epoch, d.starts = epoch, nil
	d.mu.Unlock()
}

func (d *figureDB) Load(ctx context.Context, key string) ([]byte, error) {
	select {
	case d.pool <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-d.pool }()
	d.mu.Lock()
	d.starts = append(d.starts, time.Since(d.epoch))
	d.mu.Unlock()
	tm := time.NewTimer(d.cfg.loadCost)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return figureValue(key, d.cfg.valueSize), nil
}

// loadsIn counts loader calls that started in [from, to).
func (d *figureDB) loadsIn(from, to time.Duration) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, s := range d.starts {
		if s >= from && s < to {
			n++
		}
	}
	return n
}

func figureValue(key string, size int) []byte {
	v := make([]byte, size)
	copy(v, key+"=")
	for i := len(key) + 1; i < size; i++ {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// figureSystem is one cache under test, on its own redis-server.
type figureSystem struct {
	name string
	srv  *redistest.Server
	db   *figureDB
	get  func(ctx context.Context, key string) error
	// stats describes the system's counters after the run, for the log.
	stats func() string
	// holdfast marks the systems the bounds apply to.
	holdfast bool
}

// newHoldfastSystem builds holdfast over a default Tier (50 ms budget,
// default breaker) on its own server.
func newHoldfastSystem(t *testing.T, name string, cfg figureConfig, hot holdfast.HotPolicy) *figureSystem {
	srv := redistest.Standalone(t)
	tier, err := redis.New(redis.Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close() })
	cache, err := holdfast.New(holdfast.Options{
		Shared:             tier,
		MaxConcurrentLoads: cfg.loadCap,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	ns, err := cache.Namespace("stock", holdfast.Policy{
		TTL:          cfg.ttl,
		StaleIfError: cfg.staleIfError,
		Hot:          hot,
	})
	if err != nil {
		t.Fatal(err)
	}
	db := newFigureDB(cfg)
	return &figureSystem{
		name: name, srv: srv, db: db, holdfast: true,
		get: func(ctx context.Context, key string) error {
			res, err := ns.Get(ctx, key, db.Load)
			if err != nil {
				return err
			}
			return checkValue(key, res.Value)
		},
		stats: func() string {
			s, ts := ns.Stats(), tier.Stats()
			return fmt.Sprintf("hot %d, shared hits %d / misses %d / errors %d / bypassed %d, local %d, stale-on-error %d, loads %d, coalesced %d, rejected %d; breaker opens %d, tier timeouts %d",
				s.Get("hot.hits"), s.Get("shared.hits"), s.Get("shared.misses"), s.Get("shared.errors"), s.Get("shared.bypassed"), s.Get("local_served"), s.Get("stale_on_error"), s.Get("loads"), s.Get("coalesced"), s.Get("load.rejected"), ts.BreakerOpens, ts.Timeouts)
		},
	}
}

// naiveTimeout is the naive cache-aside's command timeout, the 100 ms a
// production autocomplete service adopted after a Redis outage.
const naiveTimeout = 100 * time.Millisecond

// newNaiveSystem is cache-aside as that autocomplete service had it, over
// rueidis with its default options (client-side caching off): GET with a
// 100 ms timeout; on a miss or any error, the loader; then SET with a 100 ms
// timeout, its error ignored. No breaker, no coalescing, no local copy.
func newNaiveSystem(t *testing.T, cfg figureConfig) *figureSystem {
	srv := redistest.Standalone(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	db := newFigureDB(cfg)
	var mu sync.Mutex
	var hits, misses, getErrs, setErrs int
	count := func(p *int) { mu.Lock(); *p++; mu.Unlock() }
	return &figureSystem{
		name: "naive", srv: srv, db: db,
		get: func(ctx context.Context, key string) error {
			gctx, cancel := context.WithTimeout(ctx, naiveTimeout)
			v, err := client.Do(gctx, client.B().Get().Key("stock:"+key).Build()).AsBytes()
			cancel()
			switch {
			case err == nil:
				count(&hits)
				return checkValue(key, v)
			case rueidis.IsRedisNil(err):
				count(&misses)
			default:
				count(&getErrs)
			}
			v, err = db.Load(ctx, key)
			if err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(ctx, naiveTimeout)
			if client.Do(sctx, client.B().Set().Key("stock:"+key).Value(string(v)).PxMilliseconds(cfg.ttl.Milliseconds()).Build()).Error() != nil {
				count(&setErrs)
			}
			cancel()
			return checkValue(key, v)
		},
		stats: func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("hits %d, misses %d, get errors %d, set errors %d", hits, misses, getErrs, setErrs)
		},
	}
}

var errWrongValue = errors.New("wrong value")

func checkValue(key string, v []byte) error {
	if !bytes.HasPrefix(v, []byte(key+"=")) {
		return fmt.Errorf("%w for %q: %.20q", errWrongValue, key, v)
	}
	return nil
}

// sample is one request: when it was sent (since the epoch), how long it
// took, and whether it failed or was never sent (the generator's bound on
// requests in flight was reached).
type sample struct {
	at, lat time.Duration
	err     error
	dropped bool
}

// maxInFlight bounds each generator's goroutines; at 200 req/s it allows
// 10 s of requests stuck at once before one is dropped (and counted).
const maxInFlight = 2000

// openLoad sends rate requests per second for total, from the epoch, each on
// its own goroutine, whatever the earlier ones are doing (an open model: a
// slow system does not slow the arrivals). Latency is measured from when the
// request is sent; the generator's own lateness, if any, is not charged to
// the system. It returns when every request has finished.
func openLoad(sys *figureSystem, cfg figureConfig, epoch time.Time, total time.Duration, seed uint64) []sample {
	n := int(total.Seconds() * float64(cfg.rate))
	interval := time.Second / time.Duration(cfg.rate)
	samples := make([]sample, n)
	rng := rand.New(rand.NewPCG(seed, 1))
	inFlight := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	for i := range n {
		if d := time.Until(epoch.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		key := fmt.Sprint("p", rng.IntN(cfg.keys))
		select {
		case inFlight <- struct{}{}:
		default:
			samples[i] = sample{at: time.Since(epoch), dropped: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inFlight }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			err := sys.get(ctx, key)
			samples[i] = sample{at: start.Sub(epoch), lat: time.Since(start), err: err}
		}()
	}
	wg.Wait()
	return samples
}

// phaseStats summarises the samples sent in [from, to).
type phaseStats struct {
	n, errs, dropped   int
	p50, p90, p99, max time.Duration
	firstErr           error
}

func summarise(samples []sample, from, to time.Duration) phaseStats {
	var ps phaseStats
	lats := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		ps.n++
		switch {
		case s.dropped:
			ps.dropped++
		case s.err != nil:
			ps.errs++
			if ps.firstErr == nil {
				ps.firstErr = s.err
			}
		default:
			lats = append(lats, s.lat)
		}
	}
	slices.Sort(lats)
	ps.p50, ps.p90, ps.p99 = percentile(lats, 0.50), percentile(lats, 0.90), percentile(lats, 0.99)
	if len(lats) > 0 {
		ps.max = lats[len(lats)-1]
	}
	return ps
}

// percentile returns the q-quantile of sorted by the nearest-rank method.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*q+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// runFigure runs the load on every system at once, fails every server after
// the warm phase (fail), recovers them after the outage (heal), and
// returns the samples with the actual times of the failure and the recovery,
// all measured from the start of the load (as are the loader calls).
func runFigure(t *testing.T, cfg figureConfig, systems []*figureSystem, fail, heal func(*redistest.Server)) (samples [][]sample, failAt, recoverAt time.Duration) {
	// Prewarm: every key loaded once, so Redis and the local tiers have it.
	var wg sync.WaitGroup
	for _, sys := range systems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range cfg.keys {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := sys.get(ctx, fmt.Sprint("p", k))
				cancel()
				if err != nil {
					t.Errorf("%s prewarm: %v", sys.name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	total := cfg.warm + cfg.outage + cfg.after
	start := time.Now()
	samples = make([][]sample, len(systems))
	for i, sys := range systems {
		sys.db.reset(start)
		wg.Add(1)
		go func() {
			defer wg.Done()
			samples[i] = openLoad(sys, cfg, start, total, uint64(i+1))
		}()
	}
	time.Sleep(time.Until(start.Add(cfg.warm)))
	failAt = time.Since(start)
	for _, sys := range systems {
		fail(sys.srv)
	}
	time.Sleep(time.Until(start.Add(cfg.warm + cfg.outage)))
	recoverAt = time.Since(start)
	for _, sys := range systems {
		heal(sys.srv)
	}
	wg.Wait()
	return samples, failAt, recoverAt
}

// figureTest runs one scenario and checks the bounds.
func figureTest(t *testing.T, scenario string, fail, heal func(*redistest.Server), p99Bound, p50Bound time.Duration) {
	cfg, size := figure()
	systems := []*figureSystem{
		newHoldfastSystem(t, "holdfast", cfg, holdfast.HotPolicy{}),
		newHoldfastSystem(t, "holdfast hot-all", cfg, holdfast.HotPolicy{Threshold: -1}),
		newHoldfastSystem(t, "holdfast hot-off", cfg, holdfast.HotPolicy{MaxBytes: -1}),
		newNaiveSystem(t, cfg),
	}
	samples, failAt, recoverAt := runFigure(t, cfg, systems, fail, heal)

	outage := recoverAt - failAt
	end := time.Duration(math.MaxInt64)
	loadBound := int(float64(cfg.keys) * (1 + outage.Seconds()/cfg.ttl.Seconds()))
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s run: %d req/s over %d keys, %v loader capped at %d, Policy{TTL: %v, StaleIfError: %v}, outage %v (%s at %v)\n",
		scenario, size, cfg.rate, cfg.keys, cfg.loadCost, cfg.loadCap, cfg.ttl, cfg.staleIfError, outage.Round(time.Millisecond), scenario, failAt.Round(time.Millisecond))
	fmt.Fprintf(&b, "%-17s %-7s %6s %5s %5s %9s %9s %9s %9s %6s\n", "system", "phase", "reqs", "errs", "drop", "p50 ms", "p90 ms", "p99 ms", "max ms", "loads")
	for i, sys := range systems {
		for _, ph := range []struct {
			name     string
			from, to time.Duration
		}{{"before", 0, failAt}, {"outage", failAt, recoverAt}, {"after", recoverAt, end}} {
			ps := summarise(samples[i], ph.from, ph.to)
			loads := sys.db.loadsIn(ph.from, ph.to)
			fmt.Fprintf(&b, "%-17s %-7s %6d %5d %5d %9s %9s %9s %9s %6d\n", sys.name, ph.name, ps.n, ps.errs, ps.dropped, ms(ps.p50), ms(ps.p90), ms(ps.p99), ms(ps.max), loads)
			if !sys.holdfast || ph.name != "outage" {
				continue
			}
			if ps.errs != 0 || ps.dropped != 0 {
				t.Errorf("%s: %d errors, %d dropped during the outage (first: %v)", sys.name, ps.errs, ps.dropped, ps.firstErr)
			}
			if ps.p50 > p50Bound {
				t.Errorf("%s: p50 %v during the outage, bound %v", sys.name, ps.p50, p50Bound)
			}
			if ps.p99 > p99Bound {
				t.Errorf("%s: p99 %v during the outage, bound %v", sys.name, ps.p99, p99Bound)
			}
			if loads > loadBound {
				t.Errorf("%s: %d loader calls during a %v outage, bound keys × (1 + outage/TTL) = %d", sys.name, loads, outage, loadBound)
			}
		}
	}
	fmt.Fprintf(&b, "bounds on holdfast during the outage: 0 errors, p50 ≤ %v, p99 ≤ %v, loads ≤ %d\n", p50Bound, p99Bound, loadBound)
	for _, sys := range systems {
		fmt.Fprintf(&b, "%s: %s\n", sys.name, sys.stats())
	}
	t.Logf("\n%s", b.String())
}

// TestFigureRedisFrozen: Redis SIGSTOPped for the outage, then SIGCONTed.
// Target (full run): holdfast in the frozen window p50 ≤ 2 ms,
// p99 ≤ 60 ms, 0 errors; loader calls ≤ keys × (1 + outage/TTL).
func TestFigureRedisFrozen(t *testing.T) {
	cfg, _ := figure()
	figureTest(t, "frozen", (*redistest.Server).Freeze, (*redistest.Server).Thaw, cfg.frozenP99, cfg.frozenP50)
}

// TestFigureRedisKilled: Redis SIGKILLed for the outage, then restarted
// empty. Target (full run): p99 ≤ 20 ms, 0 errors; loader calls ≤
// keys × (1 + outage/TTL). (The p50 bound is the frozen one.)
func TestFigureRedisKilled(t *testing.T) {
	cfg, _ := figure()
	figureTest(t, "killed", (*redistest.Server).Kill, (*redistest.Server).Restart, cfg.killedP99, cfg.frozenP50)
}
