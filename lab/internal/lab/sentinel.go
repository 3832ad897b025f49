package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// sentinel-failover: a primary with two replicas under three sentinels
// (down-after 1 s, failover-timeout 2 s), 200 req/s over 100 keys, and a
// writer in the reading process that updates a key of its own every 50 ms,
// invalidates it and reads it back, while a checker reads the writer's keys
// every 10 ms; the primary is SIGKILLed a quarter in. Figures:
//
//   - the window's p99 and errors over the standard load (the window is
//     the 3 s from the kill, sentinelWindow), and steady_p99_ms, the p99
//     of the load's reads before the kill, timed from their start (the run
//     starts cold: the first read of each key, a tenth of these reads,
//     loads, as in every scenario of the standard load); the writer's
//     keys are apart from the load's: every read after an invalidation
//     waits for a load, in either mode and with or without a fault, and
//     over the load's keys those waits alone would set its p99;
//   - writer_read_p99_ms: the read-backs' and the checker's reads;
//   - failover_ms: from the kill until the first +switch-master of any
//     sentinel, heard on a subscription to each;
//   - first_write_ms: from the kill until a write of the mode's own
//     client, one every 10 ms, is acknowledged (after a kill, by the new
//     primary), and write_after_failover_ms, the difference;
//   - old_reads: reads of the writer's keys begun after an Invalidate of
//     their key had returned, that returned a version older than the one
//     that Invalidate was for: read-your-invalidations in the writer's
//     process.
//
// Naive is cache-aside over go-redis v9's FailoverClient, the Sentinel
// client most Go services use, with the naive mode's 100 ms timeouts and
// no retries; an invalidation is a DEL.

func init() {
	Register(Scenario{
		Name:    "sentinel-failover",
		Summary: "A Sentinel group's primary (1 primary, 2 replicas, 3 sentinels) SIGKILLed under 200 req/s over 100 keys, with a writer in the same process updating, invalidating and reading back keys of its own every 50 ms: window p99 and errors, failover_ms, first_write_ms, old_reads.",
		// Separate: a failover takes its seconds at any scale, and the
		// default test run has no room for them.
		Separate: true,
		Plan:     sentinelFailover,
	})
}

// sentinelWriteEvery, sentinelCheckEvery and sentinelProbeEvery pace the
// writer's updates, the checker's reads and the probe writes; the writer
// goes round robin over sentinelWriterKeys keys of its own.
const (
	sentinelWriteEvery = 50 * time.Millisecond
	sentinelCheckEvery = 10 * time.Millisecond
	sentinelProbeEvery = 10 * time.Millisecond
	sentinelWriterKeys = 20
)

// sentinelWindow is the failover's window from the kill: the sentinels'
// down-after (1 s) and failover timeout (2 s). A longer window adds reads
// of a healthy tier, whose p99 is set by the loads of keys nobody read
// between their soft and hard time: at two reads a second a key goes
// unread for the last fifth of its TTL in e^-2 of its lifetimes of ten
// reads, 1.3% of reads (1.5 to 1.8% measured), with or without a
// failover.
const sentinelWindow = 3 * time.Second

// sentinelWriterKey is the writer's i-th key, apart from the load's.
func sentinelWriterKey(i int) string { return fmt.Sprintf("writer:%d", i%sentinelWriterKeys) }

func sentinelFailover(o Options) Plan {
	d := o.length(baseDuration)
	t := baseTraffic(d)
	t.Sentinel = true
	kill := (d / 4).Round(time.Millisecond)
	t.Window = [2]time.Duration{kill, min(kill+sentinelWindow, d)}
	p := baseParams(d, t.Window)
	p["redis_server"] = "1 primary + 2 replicas under 3 sentinels (down-after-milliseconds 1000, failover-timeout 2000), fresh per mode"
	p["naive_redis_client"] = "go-redis v9 FailoverClient, 100 ms dial/read/write timeouts, no retries"
	p["fault"] = "SIGKILL the primary at fault_start_s"
	p["writer"] = fmt.Sprintf("in the reading process: every %v, update one of %d keys of its own (round robin, apart from the load's), invalidate it and read it back; a checker reads one of them every %v", sentinelWriteEvery, sentinelWriterKeys, sentinelCheckEvery)
	p["probe_write_every_ms"] = ms(sentinelProbeEvery)

	var run *sentinelRun
	t.Setup = func(f *Fixture) (err error) {
		run, err = startSentinelRun(f)
		return err
	}
	t.Before = func(*Fixture, Request) any { return time.Now() }
	t.Observe = func(_ *Fixture, _ Request, before any, _ []byte, _ error) { run.steady(before.(time.Time)) }
	t.Faults = []Fault{{At: kill, Name: "kill primary", Do: func(ctx context.Context, f *Fixture) error {
		return run.killPrimary(ctx, f)
	}}}
	t.Extra = func(f *Fixture, r *ModeResult) { run.stop(r) }
	return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode,
		Marks:  []Mark{{At: kill, Label: "primary killed"}},
		Figure: "window: holdfast p99 ≤ 5 ms, 0 errors; writes taken within the sentinels' failover + 1 s; 0 reads older than their invalidation"}
}

// sentinelRun is one mode's writer, probe writes and failover clock.
type sentinelRun struct {
	f      *Fixture
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	inv         map[string]int64 // key -> version its last returned Invalidate was for
	killedAt    time.Time
	failoverAt  time.Time
	firstWrite  time.Time
	invalidates atomic.Int64
	invErrors   atomic.Int64
	oldReads    atomic.Int64
	readErrors  atomic.Int64
	reads       []time.Duration // the writer's keys' reads, under mu
	steadyReads []time.Duration // the load's reads begun before the kill, under mu
}

// steady records a read of the load that began at start, before the kill.
func (r *sentinelRun) steady(start time.Time) {
	took := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.killedAt.IsZero() {
		r.steadyReads = append(r.steadyReads, took)
	}
}

// startSentinelRun starts the writer and the probe writes; they stop at
// stop, or at the latest a minute after the run's end.
func startSentinelRun(f *Fixture) (*sentinelRun, error) {
	r := &sentinelRun{f: f, inv: map[string]int64{}}
	r.ctx, r.cancel = context.WithTimeout(context.Background(), 5*time.Minute)
	for _, addr := range f.Sentinel.SentinelAddrs() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			r.cancel()
			r.wg.Wait()
			return nil, fmt.Errorf("sentinel %s: %w", addr, err)
		}
		r.wg.Add(1)
		go r.hear(c)
	}
	r.wg.Add(3)
	go r.writer()
	go r.checker()
	go r.probe()
	return r, nil
}

// hear records the first +switch-master c's sentinel announces, until the
// run stops.
func (r *sentinelRun) hear(c rueidis.Client) {
	defer r.wg.Done()
	defer c.Close()
	_ = c.Receive(r.ctx, c.B().Subscribe().Channel("+switch-master").Build(), func(rueidis.PubSubMessage) {
		now := time.Now()
		r.mu.Lock()
		if r.failoverAt.IsZero() || now.Before(r.failoverAt) {
			r.failoverAt = now
		}
		r.mu.Unlock()
	})
}

// writer updates a key of its own in the source, invalidates it and reads
// it back, round robin over its keys.
func (r *sentinelRun) writer() {
	defer r.wg.Done()
	tick := time.NewTicker(sentinelWriteEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		key := sentinelWriterKey(i)
		ver := r.f.Source.Update(key)
		ctx, cancel := context.WithTimeout(r.ctx, time.Second)
		err := r.f.Reader.Invalidate(ctx, key)
		cancel()
		r.invalidates.Add(1)
		if err != nil {
			r.invErrors.Add(1)
		}
		// A read that begins from now on must not return an older version.
		r.mu.Lock()
		r.inv[key] = ver
		r.mu.Unlock()
		r.read(key)
	}
}

// checker reads one of the writer's keys every sentinelCheckEvery.
func (r *sentinelRun) checker() {
	defer r.wg.Done()
	tick := time.NewTicker(sentinelCheckEvery)
	defer tick.Stop()
	for i := 0; ; i += 7 { // 7 and 20 are coprime: every key in turn
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		r.read(sentinelWriterKey(i))
	}
}

// read reads key through the mode's reader, counting it old when it
// returns a version older than the one an Invalidate that returned before
// the read began was for.
func (r *sentinelRun) read(key string) {
	want := r.invalidated(key)
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	start := time.Now()
	v, _, err := r.f.Reader.Get(ctx, key)
	took := time.Since(start)
	cancel()
	switch {
	case r.ctx.Err() != nil:
		return
	case err != nil:
		r.readErrors.Add(1)
	case ValueVersion(v) < want:
		r.oldReads.Add(1)
	}
	r.mu.Lock()
	r.reads = append(r.reads, took)
	r.mu.Unlock()
}

// invalidated returns the version key's last returned Invalidate was for,
// 0 when none.
func (r *sentinelRun) invalidated(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inv[key]
}

// probe writes a key of its own through the mode's client every
// sentinelProbeEvery and records the first write acknowledged after the
// kill.
func (r *sentinelRun) probe() {
	defer r.wg.Done()
	tick := time.NewTicker(sentinelProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, 100*time.Millisecond)
		err := probeWrite(ctx, r.f.Reader)
		cancel()
		now := time.Now()
		r.mu.Lock()
		if err == nil && !r.killedAt.IsZero() && r.firstWrite.IsZero() {
			r.firstWrite = now
		}
		r.mu.Unlock()
	}
}

// probeWrite writes the probe key with the mode's own Redis client.
func probeWrite(ctx context.Context, rd Reader) error {
	switch x := rd.(type) {
	case *holdfastReader:
		t, ok := x.tier.(*redis.Tier)
		if !ok {
			return errors.New("holdfast mode without the Redis tier")
		}
		return t.Set(ctx, tier.Item{Key: "lab-probe", Value: []byte("x"), TTL: time.Minute})
	case *naiveSentinel:
		return x.c.Set(ctx, "lab-probe", "x", time.Minute).Err()
	}
	return fmt.Errorf("no probe write for %T", rd)
}

// p99 returns the 99th percentile of ds in milliseconds (quantile's
// nearest rank), false when ds is empty.
func p99(ds []time.Duration) (float64, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	sorted := make([]float64, len(ds))
	for i, d := range ds {
		sorted[i] = ms(d)
	}
	slices.Sort(sorted)
	return quantile(sorted, 0.99), true
}

// killPrimary kills the group's primary.
func (r *sentinelRun) killPrimary(ctx context.Context, f *Fixture) error {
	old, err := f.Sentinel.Primary(ctx)
	if err != nil {
		return err
	}
	old.Kill()
	r.mu.Lock()
	r.killedAt = time.Now()
	r.mu.Unlock()
	return nil
}

// stop ends the writer and the probe and adds the figures.
func (r *sentinelRun) stop(res *ModeResult) {
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Extra["invalidations"] = float64(r.invalidates.Load())
	res.Extra["invalidation_errors"] = float64(r.invErrors.Load())
	res.Extra["old_reads"] = float64(r.oldReads.Load())
	res.Extra["writer_reads"] = float64(len(r.reads))
	res.Extra["writer_read_errors"] = float64(r.readErrors.Load())
	if p, ok := p99(r.reads); ok {
		res.Extra["writer_read_p99_ms"] = p
	}
	if p, ok := p99(r.steadyReads); ok {
		res.Extra["steady_p99_ms"] = p
	}
	if r.killedAt.IsZero() || r.failoverAt.IsZero() {
		return
	}
	res.Extra["failover_ms"] = ms(r.failoverAt.Sub(r.killedAt))
	if !r.firstWrite.IsZero() {
		res.Extra["first_write_ms"] = ms(r.firstWrite.Sub(r.killedAt))
		res.Extra["write_after_failover_ms"] = ms(r.firstWrite.Sub(r.failoverAt))
	}
}

// naiveSentinel is the naive mode against a Sentinel group: cache-aside
// over go-redis's FailoverClient, which asks the sentinels for the primary
// and follows +switch-master on one of them.
type naiveSentinel struct {
	c       *goredis.Client
	load    func(ctx context.Context, key string) ([]byte, error)
	ttl     time.Duration
	timeout time.Duration

	naiveCounters
}

var _ Reader = (*naiveSentinel)(nil)

func newNaiveSentinel(cfg ReaderConfig) *naiveSentinel {
	t := cfg.timeout()
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	return &naiveSentinel{
		c: goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:    cfg.SentinelMaster,
			SentinelAddrs: append([]string(nil), cfg.SentinelAddrs...),
			DialTimeout:   t,
			ReadTimeout:   t,
			WriteTimeout:  t,
			MaxRetries:    -1, // no retries, as the naive mode's rueidis client
		}),
		load: cfg.Load, ttl: ttl, timeout: t,
	}
}

// Get is cache-aside: GET, on a miss or an error load, then SET.
func (n *naiveSentinel) Get(ctx context.Context, key string) ([]byte, bool, error) {
	gctx, cancel := context.WithTimeout(ctx, n.timeout)
	v, err := n.c.Get(gctx, key).Bytes()
	cancel()
	switch {
	case err == nil:
		n.hits.Add(1)
		return v, false, nil
	case errors.Is(err, goredis.Nil):
		n.misses.Add(1)
	default:
		n.getErrors.Add(1)
	}
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	if v, err = n.load(ctx, key); err != nil {
		n.loadErrors.Add(1)
		return nil, false, err
	}
	sctx, cancel := context.WithTimeout(ctx, n.timeout)
	if err := n.c.Set(sctx, key, v, n.ttl).Err(); err != nil {
		n.setErrors.Add(1) // swallowed: a failed put never fails the read
	}
	cancel()
	return v, false, nil
}

// Invalidate deletes key with the timeout.
func (n *naiveSentinel) Invalidate(ctx context.Context, key string) error {
	dctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	return n.c.Del(dctx, key).Err()
}

func (n *naiveSentinel) Close() error { return n.c.Close() }
