package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/testhook"
)

// update-propagation: how soon an update made in one process is served by
// every other, and what happens to that when nobody can hear anybody.
//
// Four reader processes and one writer over a 3 primaries + 3 replicas
// Cluster. The readers are OS processes, the lab's own executable started
// again in child mode as cross-process-stampede's are, each with its own
// Cache (or naive client) and its own Redis connections; the writer is the
// lab's process. The readers read 1,000 keys of Zipf popularity (s = 1.1)
// at 2,000 req/s in total, each a quarter of one fixed open-model schedule.
// The writer updates the 10 most popular keys 50 times a second (each one
// about every 200 ms): it bumps the key's version in the source, then
// invalidates the key (holdfast's Invalidate; the naive mode deletes it
// from Redis). Every value carries the version it was loaded at (Source),
// so every read says whether it was older than an update. The whole
// Cluster is frozen (SIGSTOP, every node) for the middle quarter of the
// run: 10 s of 40.
//
// The source of truth lives in the lab's process, where the writer bumps
// it: a reader's load asks it for the key's version over loopback TCP
// (versionServer), then takes the source's 12 ms and its cap of 10 loads at
// once in the reader's own process, as a database in front of each pod
// would.
//
// holdfast: the library's defaults, under which every key read enters the
// hot tier (16 MiB holds all 1,000 keys), so that every read of a key held
// within its soft time is answered from memory and an update reaches a
// reader only through the stream. Values live 5 minutes, so that during
// the run a value changes only by an invalidation.
//
// naive: the two-level cache services commonly run (LocalTTL): a local map
// whose entries live 10 s, in front of cache-aside over Redis (rueidis,
// 100 ms timeouts); the writer deletes the key from Redis. 10 s is a common
// local TTL for product data and the length of the freeze; nothing tells a
// reader of an update, so it shows up when the local entry expires.
//
// Figures, per mode (see analyzePropagation):
//   - propagation_p50/p99/max_ms: for each update made outside the freeze,
//     from the writer's Invalidate returning to the moment from which the
//     last reader serves the new version (or a newer one): the start of
//     the first of its probe reads that served it after the last that
//     served an older one. The writer tells every reader of each update as
//     soon as it has bumped the source, before it invalidates; each reader
//     then reads that key every propProbeEvery until it serves the new
//     version (probeUpdate). The schedule's own reads of a key are too far
//     apart to time this: a reader reads the 10th most popular key every
//     130 ms or so. A probe read that begins after the reader dropped its
//     copy misses and waits for the load (12 ms) of the new version; it is
//     timed by its start, the moment a request arriving gets the new
//     version. Probe reads count in old_reads_past_bound like the
//     schedule's, and in no other figure. The updates made in the freeze
//     are not probed; propagation_probe_unmeasured counts those a reader's
//     probes did not see served within propProbeFor, for which the
//     scheduled reads' figure below stands in. propagation_next_read_* is the
//     upper bound from the schedule's reads alone: to the end of the last
//     reader's first read that served the new version, so including the
//     wait for that read and its load; propagation_last_old_* the lower
//     bound: the latest start of a scheduled read, after Invalidate
//     returned, that still served an older version (0 when none did); and
//     next_read_new_share is the share of (update, reader) pairs whose
//     first scheduled read of the key begun after Invalidate returned
//     served the new version.
//   - old_reads_past_bound: reads that returned a version older than an
//     update whose Invalidate had returned more than the documented bound
//     before the read began: 100 ms when the writer and the reader both
//     hear the stream; Hot.MaxUnheard (15 s) for an update made during the
//     freeze (bumped before the thaw, its Invalidate returned after the
//     freeze began), one the writer's tier had to queue for replay (its
//     breaker open or a node not ready when it was made) and one made while
//     the reader did not hear the stream. old_reads_outage_bound counts the
//     reads outside the freeze older than such an update by more than
//     100 ms but within that bound; old_reads_during_freeze the reads begun
//     during the freeze older than an update made more than 100 ms before
//     them.
//   - hot_share_before_freeze, hot_share_during_freeze: the share of reads
//     answered by the in-process tier (holdfast's Result.Source ==
//     SourceHot; the naive mode's local map) among the reads scheduled in
//     the 10 s before the freeze and in the freeze.
//   - converge_after_thaw_ms: from the thaw to the moment every reader
//     serves the latest version made during the freeze of every key
//     updated then (a reader that served it before the thaw and nothing
//     older since counts 0; one that had not served it by the end of the
//     run counts the time to the end, and converge_unmeasured counts
//     those). converge_after_thaw_last_old_ms is its lower bound, to the
//     start of the last read that served an older version.
//   - errors, errors_during_freeze: reads that returned an error (a load
//     refused by the cap included).
//
// And, to tell where a figure comes from: propagation_before_freeze_* and
// next_read_new_share_before_freeze, the same for the updates made before
// the freeze alone (the steady state); old_reads_past_bound_updates_* by
// when the update a read missed was made (before the freeze, in it, after
// the thaw), _unheard those whose reader did not hear the stream when the
// update was made, _first_at_s and _last_at_s when the first and last such
// read began; and, for holdfast, how long after the thaw the last reader
// heard the stream again (stream_heard_after_thaw_ms), had its tier's
// breaker closed (breaker_closed_after_thaw_ms) and saw every node ready
// (nodes_ready_after_thaw_ms), and the writer's (writer_*).

const (
	propReaders     = 4
	propRate        = 2000.0
	propKeys        = 1000
	propUpdatedKeys = 10
	propUpdateRate  = 50.0
	propDuration    = 40 * time.Second
	propTTL         = 5 * time.Minute
	propLocalTTL    = 10 * time.Second
	// propHeardBound is how soon after Invalidate returns no process that
	// hears the stream may serve the older value.
	propHeardBound = 100 * time.Millisecond
	// A reader told of an update reads the key every propProbeEvery until
	// it serves the new version, for at most propProbeFor.
	propProbeEvery = time.Millisecond
	propProbeFor   = 2 * time.Second

	propagationChildKind = "propagation"
	propConfigEnv        = "HOLDFAST_LAB_PROPAGATION"
)

func updatePropagation(o Options) Plan {
	d := o.length(propDuration)
	before, freeze := propagationWindows(d)
	maxUnheard := 15 * time.Second // holdfast's default Hot.MaxUnheard
	p := map[string]any{
		"reader_processes": propReaders, "writer_processes": 1,
		"process_start": "the lab's executable in child mode, one per reader; the writer is the lab's process",
		"rate_per_s":    propRate, "keys": propKeys, "zipf_s": zipfS,
		"updated_keys": propUpdatedKeys, "updates_per_s": propUpdateRate,
		"update":    "bump the key's version in the source, then invalidate it (holdfast Invalidate; naive DEL)",
		"loader_ms": ms(baseLoader), "loader_cap": baseCap, "loader_queue": 0,
		"source":      "the writer's process holds the versions; a reader's load asks it over loopback TCP, then takes loader_ms under loader_cap in the reader's process",
		"keys_warmed": true,
		"ttl_s":       propTTL.Seconds(), "stale_if_error_s": (30 * time.Minute).Seconds(), "redis_timeout_ms": 100,
		"duration_s":    d.Seconds(),
		"fault":         "SIGSTOP every node of the Cluster at fault_start_s, SIGCONT at fault_end_s; cluster-node-timeout raised past the freeze so that no node is failed over",
		"fault_start_s": freeze[0].Seconds(), "fault_end_s": freeze[1].Seconds(),
		"before_freeze_s":    []float64{before[0].Seconds(), before[1].Seconds()},
		"bound_heard_ms":     ms(propHeardBound),
		"bound_freeze_s":     maxUnheard.Seconds(),
		"propagation":        "per update outside the freeze: Invalidate returning → the start of the last reader's first probe read (one every probe_every_ms from the update) that served the new version; _next_read_: → the end of the last reader's first scheduled read that served it (includes the wait for that read and its load); _last_old_: → the last scheduled read begun after it that served an older version",
		"probe_every_ms":     ms(propProbeEvery),
		"latency_from":       "scheduled start (open model)",
		"redis_server":       "cluster of 3 primaries + 3 replicas, fresh per mode",
		"naive_redis_client": "rueidis cluster client, no client-side cache, no retries",
		"naive_local_ttl_s":  propLocalTTL.Seconds(),
		"naive_config":       "a local map whose entries live naive_local_ttl_s in front of cache-aside over Redis; the writer deletes the key from Redis",
		"holdfast_config":    fmt.Sprintf("library defaults (every key in the hot tier); soft TTL 0.8×TTL; Hot.MaxUnheard %v; Redis tier defaults (invalidation stream, %v heartbeat)", maxUnheard, 100*time.Millisecond),
	}
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		r := &propRun{d: d, before: before, freeze: freeze, maxUnheard: maxUnheard}
		return r.run(ctx, o, m)
	}
	return Plan{Params: p, Duration: d, Window: freeze, RunMode: run,
		Figure: "holdfast: propagation_p99_ms ≤ 50 and p50 ≤ 5; old_reads_past_bound = 0; during the freeze 0 errors and hot_share_during_freeze ≥ 0.9 × hot_share_before_freeze; converge_after_thaw_ms ≤ 1000"}
}

// propagationWindows returns the 10 s (of 40) before the freeze and the
// freeze, the middle quarter of the run, scaled with its length.
func propagationWindows(d time.Duration) (before, freeze [2]time.Duration) {
	half, w := d/2, d/8
	freeze = [2]time.Duration{(half - w).Round(time.Millisecond), (half + w).Round(time.Millisecond)}
	before = [2]time.Duration{freeze[0] - (freeze[1] - freeze[0]), freeze[0]}
	return before, freeze
}

// propagationSchedule is every reader's reads: one open-model schedule of
// Zipf keys from a fixed seed, request i going to reader i mod propReaders.
func propagationSchedule(d time.Duration) []Request {
	rng := rand.New(rand.NewPCG(11, 11))
	z := rand.NewZipf(rng, zipfS, 1, propKeys-1)
	return ConstantRate(propRate, d, func(int) string { return propKey(int(z.Uint64())) })
}

// propagationUpdates is the writer's schedule: the most popular keys (the
// Zipf draw's lowest), uniformly.
func propagationUpdates(d time.Duration) []Request {
	rng := rand.New(rand.NewPCG(12, 12))
	return ConstantRate(propUpdateRate, d, func(int) string { return propKey(rng.IntN(propUpdatedKeys)) })
}

func propKey(i int) string { return "product:" + strconv.Itoa(i) }

func propKeyIndex(key string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(key, "product:"))
	if err != nil {
		return -1
	}
	return n
}

func propReaderConfig(addrs []string, load func(context.Context, string) ([]byte, error)) ReaderConfig {
	return ReaderConfig{
		RedisAddrs: addrs, Load: load, LoadCap: baseCap,
		TTL: propTTL, StaleIfError: 30 * time.Minute, Timeout: 100 * time.Millisecond,
		LocalTTL: propLocalTTL,
	}
}

// propRun is one mode's run.
type propRun struct {
	d          time.Duration
	before     [2]time.Duration
	freeze     [2]time.Duration
	maxUnheard time.Duration
	freezeAt   int64 // Unix ns, set by the fault goroutine
	thawAt     int64
}

// propChildConfig is what a reader process is told, as JSON in its
// environment; the rest is this file's constants, the same binary's.
type propChildConfig struct {
	Mode     string           `json:"mode"`
	Addrs    []string         `json:"addrs"`
	Versions string           `json:"versions"` // the version server's address
	Reader   int              `json:"reader"`
	Readers  int              `json:"readers"`
	Duration time.Duration    `json:"duration"`
	Freeze   [2]time.Duration `json:"freeze"`
}

// propChildMsg is one line a reader process writes after its run: reads in
// chunks, then Done with its figures.
type propChildMsg struct {
	// Reads: [scheduled offset ns, start Unix ns, end Unix ns, key, version
	// (-1: no value), 1 if the in-process tier answered, Outcome].
	Reads [][7]int64 `json:"reads,omitempty"`
	// Probes: the probe reads, [key, version probed for, start Unix ns,
	// end Unix ns, version (-1: no value), Outcome].
	Probes [][6]int64 `json:"probes,omitempty"`
	childTotals
	// Flags: when each of the process's healthFlags changed, [Unix ns,
	// 1 / 0], its state at the start first; empty for a mode without them.
	Flags map[string][][2]int64 `json:"flags,omitempty"`
}

func (r *propRun) run(ctx context.Context, o Options, m Mode) (res ModeResult, err error) {
	c, err := StartCluster(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	// Every node is frozen at once: when they wake, none must take the
	// others for failed (the lab's clusters fail over after 2 s), or the
	// figures after the thaw would be of a failover.
	nodeTimeout := max(15*time.Second, r.freeze[1]-r.freeze[0]+5*time.Second)
	for _, n := range c.Nodes {
		if _, err := Command(n.Addr(), time.Second, "CONFIG", "SET", "cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10)); err != nil {
			return res, fmt.Errorf("%s: CONFIG SET cluster-node-timeout: %w", n.Addr(), err)
		}
	}

	// The source of truth: only its versions are used here (the readers'
	// loads run in their processes).
	src := NewSource(SourceConfig{})
	vs, err := serveVersions(src)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, vs.Close()) }()

	// The writer. Building the mode here first reports a missing mode
	// before any process is started.
	writer, err := m.New(ctx, propReaderConfig(c.Addrs(), src.Load))
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, writer.Close()) }()

	cctx, cancel := context.WithTimeout(ctx, r.d+3*time.Minute)
	defer cancel()
	cfgs := make([]propChildConfig, propReaders)
	for i := range cfgs {
		cfgs[i] = propChildConfig{Mode: m.Name, Addrs: c.Addrs(), Versions: vs.Addr(),
			Reader: i, Readers: propReaders, Duration: r.d, Freeze: r.freeze}
	}
	// Each says ready once it has read every key once and, with a stream,
	// hears it.
	procs, err := startReaderProcs(cctx, propagationChildKind, propConfigEnv, cfgs, 90*time.Second)
	defer func() { err = errors.Join(err, procs.close()) }()
	if err != nil {
		return res, err
	}
	ops0 := nodeOps(c)
	// CPU time is measured from here to the end of the schedule and the
	// faults: the reader processes', and this one's, which writes and
	// freezes; not the processes' warm-up, nor their reports afterwards.
	start, meter, err := procs.begin(c.Nodes)
	defer meter.stop()
	if err != nil {
		return res, err
	}
	o.Progress.Begin(o.label(m), r.d)

	writerFlags := sampleFlags(healthFlags(writer))
	defer writerFlags.stop()
	f := &Fixture{Cluster: c, Source: src, Reader: writer, Start: start}
	fctx, cancelFaults := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	var faultErr error
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		faultErr = runFaults(fctx, f, []Fault{
			{At: r.freeze[0], Name: "freeze", Do: r.freezeAll},
			{At: r.freeze[1], Name: "thaw", Do: r.thawAll},
		})
	}()
	updates := r.write(ctx, start, writer, src, newProbeSender(procs.kids), o)
	if wait := time.Until(start.Add(r.d)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	cancelFaults()
	fwg.Wait()
	cpu := meter.stop()
	if faultErr != nil && !errors.Is(faultErr, context.Canceled) {
		return res, fmt.Errorf("fault: %w", faultErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if r.thawAt == 0 {
		return res, errors.New("the cluster was not thawed")
	}

	in := propRunData{
		Updates: updates, Start: start, End: start.Add(r.d).UnixNano(), FreezeAt: r.freezeAt, ThawAt: r.thawAt,
		Before: r.before, Freeze: r.freeze, MaxUnheard: r.maxUnheard, Keys: propKeys,
	}
	rec := NewRecorder(r.freeze[0], r.freeze[1])
	res.Extra = map[string]float64{}
	var loadsPerSecond []int64
	for i, k := range procs.kids {
		reads, probes, done, err := receivePropagation(k)
		if err != nil {
			return res, fmt.Errorf("reader process %d: %w", i, err)
		}
		for _, rd := range reads {
			rec.Record(rd.At, time.Duration(rd.End-start.Add(rd.At).UnixNano()), rd.Out)
		}
		in.Reads = append(in.Reads, reads)
		in.Probes = append(in.Probes, probes)
		in.Flags = append(in.Flags, flagEdges(done.Flags))
		done.add(&res, &loadsPerSecond)
	}
	procs.clean = true
	in.WriterFlags = flagEdges(writerFlags.stop())
	finishProcResult(&res, rec, r.d, loadsPerSecond, c, ops0)
	for name, v := range writer.Stats() {
		if strings.Contains(name, "invalidation") || strings.Contains(name, "delete") {
			res.Extra["writer_"+name] = v
		}
	}
	for name, v := range analyzePropagation(in) {
		res.Extra[name] = v
	}
	cpu.addTo(&res)
	return res, nil
}

// freezeAll stops every node, at as nearly the same moment as signals
// allow.
func (r *propRun) freezeAll(_ context.Context, f *Fixture) error {
	r.freezeAt = time.Now().UnixNano()
	var errs []error
	for _, n := range f.Cluster.Nodes {
		errs = append(errs, n.Freeze())
	}
	return errors.Join(errs...)
}

func (r *propRun) thawAll(_ context.Context, f *Fixture) error {
	var errs []error
	for _, n := range f.Cluster.Nodes {
		errs = append(errs, n.Thaw())
	}
	r.thawAt = time.Now().UnixNano()
	return errors.Join(errs...)
}

// write runs the writer's schedule, each update on its own goroutine at
// its time (an Invalidate that waits on a frozen Cluster must not delay
// the next update), and returns what each did. Each update is announced to
// the readers' probes between the bump and the Invalidate, so that their
// probe reads are under way before any reader can drop its copy; not those
// made in the freeze, whose probes would only read the hot tier for
// propProbeFor and take CPU from the readers' schedule.
func (r *propRun) write(ctx context.Context, start time.Time, w Reader, src *Source, probes *probeSender, o Options) []propUpdate {
	sched := propagationUpdates(r.d)
	ups := make([]propUpdate, len(sched))
	Driver{MaxInFlight: 1000}.Run(ctx, start, sched, func(ctx context.Context, i int, _ time.Duration, dropped bool) {
		q := sched[i]
		u := propUpdate{Key: propKeyIndex(q.Key), At: q.At}
		if !dropped {
			u.Ver = src.Update(q.Key)
			u.Bumped = time.Now().UnixNano()
			if q.At < r.freeze[0] || q.At >= r.freeze[1] {
				probes.send(u.Key, u.Ver) // the figure is of the updates outside the freeze
			}
			ictx, cancel := context.WithTimeout(ctx, time.Second)
			u.Err = w.Invalidate(ictx, q.Key) != nil
			cancel()
			u.Done = time.Now().UnixNano()
		}
		ups[i] = u
		o.Progress.Add(1)
	})
	return ups
}

// receivePropagation reads a reader process's results.
func receivePropagation(k *child) ([]propRead, []propProbe, propChildMsg, error) {
	var reads []propRead
	var probes []propProbe
	var done propChildMsg
	err := receiveLines(k, func(msg *propChildMsg) bool {
		for _, a := range msg.Reads {
			reads = append(reads, propRead{At: time.Duration(a[0]), Start: a[1], End: a[2],
				Key: int(a[3]), Ver: a[4], Local: a[5] == 1, Out: Outcome(a[6])})
		}
		for _, a := range msg.Probes {
			probes = append(probes, propProbe{For: a[1], propRead: propRead{Start: a[2], End: a[3],
				Key: int(a[0]), Ver: a[4], Out: Outcome(a[5])}})
		}
		done = *msg
		return msg.Done
	})
	return reads, probes, done, err
}

// probeSender tells every reader process of each update, as "probe KEY
// VERSION" lines on its stdin, which the writer's goroutines share.
type probeSender struct {
	mu   sync.Mutex
	kids []*child
}

func newProbeSender(kids []*child) *probeSender { return &probeSender{kids: kids} }

// send tells every reader; a reader that cannot be told (it exited) shows
// as unmeasured in the figures, so the error is not needed here.
func (p *probeSender) send(key int, ver int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.kids {
		fmt.Fprintf(k.in, "probe %d %d\n", key, ver)
	}
}

// prober runs a reader process's probe reads (probeUpdate).
type prober struct {
	ctx    context.Context
	r      tieredReader
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	reads  [][6]int64
}

// start probes key for version ver on a goroutine of its own, unless
// stop has been called.
func (p *prober) start(key int, ver int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.probeUpdate(key, ver)
	}()
}

// probeUpdate reads key every propProbeEvery until this process serves
// version ver or a newer one, or propProbeFor has passed: the reads that
// time when this reader stops serving the older version.
func (p *prober) probeUpdate(key int, ver int64) {
	k := propKey(key)
	until := time.Now().Add(propProbeFor)
	var mine [][6]int64
	for p.ctx.Err() == nil {
		t0 := time.Now()
		v, _, stale, err := p.r.GetTiered(p.ctx, k)
		got := int64(-1)
		if err == nil {
			got = ValueVersion(v)
		}
		end := time.Now()
		mine = append(mine, [6]int64{int64(key), ver, t0.UnixNano(), end.UnixNano(), got, int64(classify(stale, err))})
		if got >= ver || end.After(until) {
			break
		}
		time.Sleep(propProbeEvery)
	}
	p.mu.Lock()
	p.reads = append(p.reads, mine...)
	p.mu.Unlock()
}

// stop starts no more probes and returns every probe's reads once those
// under way have ended (within propProbeFor and a read).
func (p *prober) stop() [][6]int64 {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	return p.reads
}

// parseProbe parses a probeSender line.
func parseProbe(line string) (key int, ver int64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "probe" {
		return 0, 0, false
	}
	k, err1 := strconv.Atoi(f[1])
	v, err2 := strconv.ParseInt(f[2], 10, 64)
	return k, v, err1 == nil && err2 == nil
}

// propagationChildMain is a reader process of update-propagation: it builds
// the mode over the Cluster with its own source (versions asked of the lab's
// process), reads every key once, waits until it hears the invalidation
// stream (holdfast), prints "ready", and on "go START" (Unix ns) runs its
// quarter of the schedule from START. Then it writes its reads and figures
// (propChildMsg lines) and returns when stdin ends.
func propagationChildMain(stdin io.Reader, stdout io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "holdfast-lab propagation child: %v\n", err)
		return 1
	}
	var cfg propChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(propConfigEnv)), &cfg); err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	if cfg.Readers <= 0 || cfg.Reader < 0 || cfg.Reader >= cfg.Readers || cfg.Duration <= 0 {
		return fail(fmt.Errorf("bad config %+v", cfg))
	}
	mode, err := modeNamed(cfg.Mode)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	vc := &versionClient{addr: cfg.Versions, idle: make(chan *versionConn, 2*baseCap)}
	defer vc.Close()
	src := NewSource(SourceConfig{Latency: baseLoader, Cap: baseCap, VersionOf: vc.Version})
	r, err := mode.New(ctx, propReaderConfig(cfg.Addrs, src.Load))
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	tr, ok := r.(tieredReader)
	if !ok {
		return fail(fmt.Errorf("mode %s does not say which reads its in-process tier answered", cfg.Mode))
	}

	f := &Fixture{Source: src, Reader: r}
	if err := warm(f, productKeys(propKeys), baseLoader); err != nil {
		return fail(err)
	}
	if err := waitHeard(r, 30*time.Second); err != nil {
		return fail(err)
	}
	fmt.Fprintln(stdout, "ready")

	in := bufio.NewScanner(stdin)
	start, ok, err := readStart(in)
	if err != nil {
		return fail(err)
	}
	if !ok {
		return 0 // the lab gave up before the run
	}
	src.Begin(start, cfg.Freeze[0], cfg.Freeze[1])
	var mine []Request
	for i, q := range propagationSchedule(cfg.Duration) {
		if i%cfg.Readers == cfg.Reader {
			mine = append(mine, q)
		}
	}

	// The mode's health, sampled: when it heard the stream, had its breaker
	// closed and every node ready, for the figures after the thaw.
	flags := sampleFlags(healthFlags(r))
	defer flags.stop()

	// The rest of stdin is the writer's probe lines, until the lab closes
	// it after taking this process's results.
	pr := &prober{ctx: ctx, r: tr}
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		for in.Scan() {
			if key, ver, ok := parseProbe(in.Text()); ok {
				pr.start(key, ver)
			}
		}
	}()

	reads := make([][7]int64, len(mine))
	Driver{MaxInFlight: 2000}.Run(ctx, start, mine, func(ctx context.Context, i int, _ time.Duration, dropped bool) {
		q := mine[i]
		rec := [7]int64{int64(q.At), 0, 0, int64(propKeyIndex(q.Key)), -1, 0, int64(Failed)}
		if dropped {
			rec[1], rec[2] = start.Add(q.At).UnixNano(), time.Now().UnixNano()
			reads[i] = rec
			return
		}
		t0 := time.Now()
		v, local, stale, err := tr.GetTiered(ctx, q.Key)
		rec[1], rec[2] = t0.UnixNano(), time.Now().UnixNano()
		if err == nil {
			rec[4] = ValueVersion(v)
		}
		if local {
			rec[5] = 1
		}
		rec[6] = int64(classify(stale, err))
		reads[i] = rec
	})
	sampled := flags.stop()
	probes := pr.stop()

	enc := json.NewEncoder(stdout)
	const chunk = 2000
	for i := 0; i < len(reads); i += chunk {
		if err := enc.Encode(propChildMsg{Reads: reads[i:min(i+chunk, len(reads))]}); err != nil {
			return fail(err)
		}
	}
	for i := 0; i < len(probes); i += chunk {
		if err := enc.Encode(propChildMsg{Probes: probes[i:min(i+chunk, len(probes))]}); err != nil {
			return fail(err)
		}
	}
	total, win := src.Calls()
	done := propChildMsg{Flags: sampled, childTotals: childTotals{Done: true, Stats: r.Stats(),
		Loads: total, LoadsWindow: win, LoadsPerSecond: src.CallsPerSecond()}}
	if err := enc.Encode(done); err != nil {
		return fail(err)
	}
	<-stdinDone
	return 0
}

// streamHeard returns whether r hears its invalidation stream when r is
// the holdfast mode over a tier that has one; nil otherwise.
func streamHeard(r Reader) func() bool {
	h, ok := r.(*holdfastReader)
	if !ok || h.ns.Stats().Get("capability.stream") == 0 {
		return nil
	}
	return func() bool { return testhook.StreamHeard(h.c) }
}

// healthFlags are yes/no states of a process's mode, sampled to tell when
// each came back after the thaw: "stream", its Cache hears the
// invalidation stream; "breaker", its Redis tier's breaker is closed;
// "nodes", the tier sees every Cluster node ready. Empty for a mode without
// them (naive).
func healthFlags(r Reader) map[string]func() bool {
	out := map[string]func() bool{}
	if heard := streamHeard(r); heard != nil {
		out["stream"] = heard
	}
	if closed, ready := tierHealth(r); closed != nil {
		out["breaker"], out["nodes"] = closed, ready
	}
	return out
}

// flagSampler samples flags every 5 ms and keeps their changes.
type flagSampler struct {
	flags map[string]func() bool
	edges map[string][][2]int64
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

func sampleFlags(flags map[string]func() bool) *flagSampler {
	s := &flagSampler{flags: flags, edges: map[string][][2]int64{}, done: make(chan struct{})}
	if len(flags) == 0 {
		return s
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		last := map[string]int64{}
		for {
			now := time.Now().UnixNano()
			for name, f := range s.flags {
				v := int64(0)
				if f() {
					v = 1
				}
				if l, ok := last[name]; !ok || l != v {
					s.edges[name] = append(s.edges[name], [2]int64{now, v})
					last[name] = v
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the sampling (once; later calls return nil) and returns the
// changes, by flag.
func (s *flagSampler) stop() map[string][][2]int64 {
	var out map[string][][2]int64
	s.once.Do(func() {
		close(s.done)
		s.wg.Wait()
		out = s.edges
	})
	return out
}

// flagEdges turns a flagSampler's changes into flagEdges.
func flagEdges(m map[string][][2]int64) map[string][]flagEdge {
	out := make(map[string][]flagEdge, len(m))
	for name, es := range m {
		for _, e := range es {
			out[name] = append(out[name], flagEdge{At: e[0], On: e[1] == 1})
		}
	}
	return out
}

// versionServer answers "KEY\n" with the key's current version in src,
// "N\n": the readers' database, in the writer's process.
type versionServer struct {
	ln  net.Listener
	src *Source

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func serveVersions(src *Source) (*versionServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &versionServer{ln: ln, src: src, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *versionServer) Addr() string { return s.ln.Addr().String() }

func (s *versionServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *versionServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	in := bufio.NewScanner(c)
	out := bufio.NewWriter(c)
	for in.Scan() {
		v, _ := s.src.Version(in.Text())
		fmt.Fprintf(out, "%d\n", v)
		if out.Flush() != nil {
			return
		}
	}
}

// Close stops the server and ends its connections.
func (s *versionServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// versionClient asks a versionServer, over a few kept connections.
type versionClient struct {
	addr string
	idle chan *versionConn
}

type versionConn struct {
	net.Conn
	r *bufio.Reader
}

// Version returns key's current version, within a second or ctx.
func (c *versionClient) Version(ctx context.Context, key string) (int64, error) {
	var vc *versionConn
	select {
	case vc = <-c.idle:
	default:
		conn, err := net.DialTimeout("tcp", c.addr, time.Second)
		if err != nil {
			return 0, err
		}
		vc = &versionConn{Conn: conn, r: bufio.NewReader(conn)}
	}
	deadline := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = vc.SetDeadline(deadline)
	if _, err := io.WriteString(vc, key+"\n"); err != nil {
		vc.Close()
		return 0, err
	}
	line, err := vc.r.ReadString('\n')
	if err != nil {
		vc.Close()
		return 0, err
	}
	select {
	case c.idle <- vc:
	default:
		vc.Close()
	}
	return strconv.ParseInt(strings.TrimSpace(line), 10, 64)
}

// Close closes the idle connections.
func (c *versionClient) Close() {
	for {
		select {
		case vc := <-c.idle:
			vc.Close()
		default:
			return
		}
	}
}

// propRead is one read of a reader process.
type propRead struct {
	At         time.Duration // scheduled offset from the start
	Start, End int64         // Unix ns
	Key        int
	Ver        int64 // -1: no value
	Local      bool  // answered by the in-process tier
	Out        Outcome
}

func (r propRead) served() bool { return (r.Out == OK || r.Out == Stale) && r.Ver >= 0 }

// propProbe is one probe read of a reader process (prober): At is unset.
type propProbe struct {
	propRead
	For int64 // the version probed for
}

// propUpdate is one update of the writer.
type propUpdate struct {
	Key          int
	Ver          int64 // 0: not made (the driver had no room for it)
	At           time.Duration
	Bumped, Done int64 // Unix ns: the source's version bumped; Invalidate returned
	Err          bool  // Invalidate returned an error
}

// flagEdge is a change of one of a process's healthFlags.
type flagEdge struct {
	At int64 // Unix ns
	On bool
}

// onAt reports a flag's state at t: on before its first sample (each
// process heard the stream before it said ready).
func onAt(edges []flagEdge, t int64) bool {
	on := true
	for _, e := range edges {
		if e.At > t {
			break
		}
		on = e.On
	}
	return on
}

// onAfter returns how long after t the flag was on again (0 when it was on
// at t); false when it never was by the end of the samples.
func onAfter(edges []flagEdge, t int64) (int64, bool) {
	if onAt(edges, t) {
		return 0, true
	}
	for _, e := range edges {
		if e.At > t && e.On {
			return e.At - t, true
		}
	}
	return 0, false
}

// propRunData is what analyzePropagation needs of one mode's run.
type propRunData struct {
	Reads            [][]propRead  // per reader
	Probes           [][]propProbe // per reader
	Updates          []propUpdate
	Flags            []map[string][]flagEdge // per reader, by healthFlags name
	WriterFlags      map[string][]flagEdge
	Start            time.Time
	End              int64            // Unix ns: the end of the run's schedule
	FreezeAt, ThawAt int64            // Unix ns
	Before, Freeze   [2]time.Duration // scheduled offsets
	MaxUnheard       time.Duration
	Keys             int
}

// keyReads is one reader's served reads of one key, indexed for the
// questions analyzePropagation asks.
type keyReads struct {
	byStart []propRead
	// firstEndFrom[v]: the earliest end of a read of version ≥ v;
	// lastStartBelow[v]: the latest start of a read of a version < v.
	firstEndFrom, lastStartBelow []int64
}

func newKeyReads(rs []propRead, maxVer int64) *keyReads {
	k := &keyReads{byStart: rs}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
	n := int(maxVer) + 2
	k.firstEndFrom = make([]int64, n)
	k.lastStartBelow = make([]int64, n)
	for i := range k.firstEndFrom {
		k.firstEndFrom[i] = math.MaxInt64
	}
	for _, r := range rs {
		v := min(int(r.Ver), n-1)
		k.firstEndFrom[v] = min(k.firstEndFrom[v], r.End)
		if v+1 < n {
			k.lastStartBelow[v+1] = max(k.lastStartBelow[v+1], r.Start)
		}
	}
	for v := n - 2; v >= 0; v-- {
		k.firstEndFrom[v] = min(k.firstEndFrom[v], k.firstEndFrom[v+1])
	}
	for v := 1; v < n; v++ {
		k.lastStartBelow[v] = max(k.lastStartBelow[v], k.lastStartBelow[v-1])
	}
	return k
}

func (k *keyReads) firstEnd(v int64) int64 {
	if int(v) >= len(k.firstEndFrom) {
		return math.MaxInt64
	}
	return k.firstEndFrom[v]
}

func (k *keyReads) lastOldStart(v int64) int64 {
	return k.lastStartBelow[min(int(v), len(k.lastStartBelow)-1)]
}

// next returns the first read begun at or after t.
func (k *keyReads) next(t int64) (propRead, bool) {
	i := sort.Search(len(k.byStart), func(i int) bool { return k.byStart[i].Start >= t })
	if i == len(k.byStart) {
		return propRead{}, false
	}
	return k.byStart[i], true
}

// analyzePropagation computes the scenario's figures (see the top of this
// file) from every read and update of a mode.
func analyzePropagation(in propRunData) map[string]float64 {
	out := map[string]float64{}
	inFreeze := func(u propUpdate) bool { return u.Bumped < in.ThawAt && u.Done >= in.FreezeAt }
	inWin := func(at time.Duration, w [2]time.Duration) bool { return at >= w[0] && at < w[1] }
	msOf := func(ns int64) float64 { return math.Round(float64(ns)/1e3) / 1e3 }

	// Updates of each key, indexed by version - 1.
	byVer := make([][]propUpdate, in.Keys)
	var updates, duringFreeze, writerErrors int
	for _, u := range in.Updates {
		if u.Ver <= 0 || u.Key < 0 || u.Key >= in.Keys {
			continue
		}
		updates++
		if inFreeze(u) {
			duringFreeze++
		}
		if u.Err {
			writerErrors++
		}
		for int64(len(byVer[u.Key])) < u.Ver {
			byVer[u.Key] = append(byVer[u.Key], propUpdate{})
		}
		byVer[u.Key][u.Ver-1] = u
	}
	out["updates"] = float64(updates)
	out["updates_during_freeze"] = float64(duringFreeze)
	out["writer_errors"] = float64(writerErrors)

	// Each reader's served reads, by key.
	reads := make([][]*keyReads, len(in.Reads))
	for r, rs := range in.Reads {
		per := make([][]propRead, in.Keys)
		for _, rd := range rs {
			if rd.served() && rd.Key >= 0 && rd.Key < in.Keys {
				per[rd.Key] = append(per[rd.Key], rd)
			}
		}
		reads[r] = make([]*keyReads, in.Keys)
		for k := range per {
			reads[r][k] = newKeyReads(per[k], int64(len(byVer[k])))
		}
	}
	hasStream := len(in.Flags) == len(in.Reads) && len(in.Reads) > 0
	for _, f := range in.Flags {
		if _, ok := f["stream"]; !ok {
			hasStream = false
		}
	}
	unheard := func(r int, t int64) bool { return hasStream && !onAt(in.Flags[r]["stream"], t) }
	// The writer's tier queues an invalidation, to be announced when it is
	// replayed, while its breaker is open or a node is not ready.
	writerOut := func(u propUpdate) bool {
		for _, f := range []string{"breaker", "nodes"} {
			if e, ok := in.WriterFlags[f]; ok && (!onAt(e, u.Bumped) || !onAt(e, u.Done)) {
				return true
			}
		}
		return false
	}
	// bound is the documented bound for reader r to stop serving versions
	// older than u: 100 ms when both it and the writer hear the stream, the
	// outage bound (Hot.MaxUnheard) for an update made during the freeze,
	// one the writer's tier had to queue, or one made while r did not hear
	// the stream.
	outage := func(r int, u propUpdate) bool { return inFreeze(u) || writerOut(u) || unheard(r, u.Done) }
	bound := func(r int, u propUpdate) int64 {
		if outage(r, u) {
			return int64(in.MaxUnheard)
		}
		return int64(propHeardBound)
	}

	// Propagation of the updates made outside the freeze; and of those
	// made before it alone, the steady state, apart from those made after
	// the thaw.
	// Each reader's probe reads, by the update they probed.
	type probed struct {
		key int
		ver int64
	}
	probes := make([]map[probed][]propProbe, len(in.Reads))
	for r := range probes {
		probes[r] = map[probed][]propProbe{}
		if r < len(in.Probes) {
			for _, p := range in.Probes[r] {
				k := probed{p.Key, p.For}
				probes[r][k] = append(probes[r][k], p)
			}
		}
		for _, ps := range probes[r] {
			sort.Slice(ps, func(i, j int) bool { return ps[i].Start < ps[j].Start })
		}
	}
	// servesFrom is when reader r's probes show it serving u's version: the
	// start of the first probe read that served it (or newer) after the
	// last that served an older one; false when none did.
	servesFrom := func(r int, u propUpdate) (int64, bool) {
		var from int64
		ok := false
		for _, p := range probes[r][probed{u.Key, u.Ver}] {
			switch {
			case !p.served():
			case p.Ver < u.Ver:
				ok = false
			case !ok:
				from, ok = p.Start, true
			}
		}
		return from, ok
	}

	propagation := func(prefix, suffix string, take func(u propUpdate) bool) {
		var probed, upper, lower []float64
		var unmeasured, probeUnmeasured, pairs, nextNew int
		for _, u := range in.Updates {
			if u.Ver <= 0 || u.Key < 0 || u.Key >= in.Keys || inFreeze(u) || !take(u) {
				continue
			}
			var at int64
			all := len(reads) > 0
			for r := range reads {
				from, ok := servesFrom(r, u)
				if !ok {
					all = false
					break
				}
				at = max(at, from-u.Done)
			}
			if !all {
				at = -1
			}

			var hi, lo int64
			seen := len(reads) > 0
			for r := range reads {
				kr := reads[r][u.Key]
				first := kr.firstEnd(u.Ver)
				if first == math.MaxInt64 {
					seen = false
					continue
				}
				hi = max(hi, first-u.Done)
				if ls := kr.lastOldStart(u.Ver); ls >= u.Done {
					lo = max(lo, ls-u.Done)
				}
				if nr, ok := kr.next(u.Done); ok {
					pairs++
					if nr.Ver >= u.Ver {
						nextNew++
					}
				}
			}
			if at < 0 {
				// A reader's probes did not see the new version within
				// propProbeFor: the scheduled reads' upper bound stands in.
				probeUnmeasured++
				at = hi
				if !seen {
					at = in.End - u.Done
				}
			}
			probed = append(probed, msOf(at))
			if !seen {
				unmeasured++ // some reader never served it (the run ended first)
				continue
			}
			upper = append(upper, msOf(hi))
			lower = append(lower, msOf(lo))
		}
		sort.Float64s(probed)
		sort.Float64s(upper)
		sort.Float64s(lower)
		out[prefix+"_p50_ms"] = quantile(probed, 0.50)
		out[prefix+"_p99_ms"] = quantile(probed, 0.99)
		out[prefix+"_max_ms"] = quantile(probed, 1)
		out[prefix+"_updates"] = float64(len(probed))
		out[prefix+"_probe_unmeasured"] = float64(probeUnmeasured)
		out[prefix+"_next_read_p50_ms"] = quantile(upper, 0.50)
		out[prefix+"_next_read_p99_ms"] = quantile(upper, 0.99)
		out[prefix+"_next_read_max_ms"] = quantile(upper, 1)
		out[prefix+"_next_read_updates"] = float64(len(upper))
		out[prefix+"_next_read_unmeasured"] = float64(unmeasured)
		out[prefix+"_last_old_p50_ms"] = quantile(lower, 0.50)
		out[prefix+"_last_old_p99_ms"] = quantile(lower, 0.99)
		out[prefix+"_last_old_max_ms"] = quantile(lower, 1)
		if pairs > 0 {
			out["next_read_new_share"+suffix] = float64(nextNew) / float64(pairs)
		}
	}
	propagation("propagation", "", func(propUpdate) bool { return true })
	propagation("propagation_before_freeze", "_before_freeze", func(u propUpdate) bool { return u.Done < in.FreezeAt })

	// Old reads, errors, hot shares.
	var pastBound, pastUnheard, oldInFreeze, oldOutage, errs, errsFreeze int
	var pastOfBefore, pastOfFreeze, pastOfAfter int // by when the update they missed was made
	var pastAge, pastFirst, pastLast int64
	var pastProbe int // of them, probe reads
	var nBefore, hotBefore, nFreeze, hotFreeze int
	for r, rs := range in.Reads {
		// The probe reads are judged by the bound like the schedule's
		// (old_reads_past_bound and its breakdown), and count in no other
		// figure.
		scheduled := len(rs)
		if r < len(in.Probes) {
			rs = slices.Clone(rs)
			for _, p := range in.Probes[r] {
				p.At = time.Duration(p.Start - in.Start.UnixNano())
				rs = append(rs, p.propRead)
			}
		}
		for i, rd := range rs {
			frozen, probe := inWin(rd.At, in.Freeze), i >= scheduled
			if !probe {
				if inWin(rd.At, in.Before) {
					nBefore++
					if rd.Local {
						hotBefore++
					}
				}
				if frozen {
					nFreeze++
					if rd.Local {
						hotFreeze++
					}
				}
				if rd.Out == Failed || rd.Out == Rejected {
					errs++
					if frozen {
						errsFreeze++
					}
				}
			}
			if !rd.served() || rd.Key < 0 || rd.Key >= in.Keys {
				continue
			}
			violated, old, outageOld := false, false, false
			for _, u := range byVer[rd.Key][min(int(rd.Ver), len(byVer[rd.Key])):] {
				if u.Ver == 0 {
					continue
				}
				if u.Bumped > rd.Start {
					break // written after the read began
				}
				age := rd.Start - u.Done
				if !outageOld && !probe && !frozen && !inFreeze(u) && age > int64(propHeardBound) && age <= bound(r, u) {
					outageOld = true
					oldOutage++ // within the outage bound, past the 100 ms one
				}
				if !violated && age > bound(r, u) {
					violated = true
					pastBound++
					if probe {
						pastProbe++
					}
					if unheard(r, u.Done) {
						pastUnheard++
					}
					switch {
					case inFreeze(u):
						pastOfFreeze++
					case u.Done < in.FreezeAt:
						pastOfBefore++
					default:
						pastOfAfter++
					}
					pastAge = max(pastAge, age)
					at := rd.Start - in.Start.UnixNano()
					if pastFirst == 0 || at < pastFirst {
						pastFirst = at
					}
					pastLast = max(pastLast, at)
				}
				if !old && !probe && frozen && age > int64(propHeardBound) {
					old = true
					oldInFreeze++
				}
				if violated && (old || !frozen) {
					break
				}
			}
		}
	}
	out["old_reads_past_bound"] = float64(pastBound)
	out["old_reads_during_freeze"] = float64(oldInFreeze)
	out["old_reads_outage_bound"] = float64(oldOutage)
	if pastBound > 0 {
		out["old_reads_past_bound_max_age_ms"] = msOf(pastAge)
		out["old_reads_past_bound_first_at_s"] = float64(pastFirst) / 1e9
		out["old_reads_past_bound_last_at_s"] = float64(pastLast) / 1e9
		out["old_reads_past_bound_updates_before_freeze"] = float64(pastOfBefore)
		out["old_reads_past_bound_updates_in_freeze"] = float64(pastOfFreeze)
		out["old_reads_past_bound_updates_after_thaw"] = float64(pastOfAfter)
		out["old_reads_past_bound_probe"] = float64(pastProbe)
	}
	if hasStream {
		out["old_reads_past_bound_unheard"] = float64(pastUnheard)
	}
	out["errors"] = float64(errs)
	out["errors_during_freeze"] = float64(errsFreeze)
	if nBefore > 0 {
		out["hot_share_before_freeze"] = float64(hotBefore) / float64(nBefore)
	}
	if nFreeze > 0 {
		out["hot_share_during_freeze"] = float64(hotFreeze) / float64(nFreeze)
	}

	// Convergence after the thaw, on the latest version made during the
	// freeze of each key updated then.
	latest := map[int]int64{}
	for _, u := range in.Updates {
		if u.Ver > 0 && u.Key >= 0 && u.Key < in.Keys && inFreeze(u) {
			latest[u.Key] = max(latest[u.Key], u.Ver)
		}
	}
	if len(latest) > 0 {
		var conv, convLo int64
		convUnmeasured := 0
		for k, v := range latest {
			for r := range reads {
				var lastOldEnd, lastOldStart int64
				for _, rd := range reads[r][k].byStart {
					if rd.Ver < v {
						lastOldEnd = max(lastOldEnd, rd.End)
						lastOldStart = max(lastOldStart, rd.Start)
					}
				}
				convLo = max(convLo, lastOldStart-in.ThawAt)
				// The first read of v or newer that ended after the last
				// older one (and after the thaw, unless that one ended
				// before the thaw: then the reader had converged by then).
				first := int64(math.MaxInt64)
				for _, rd := range reads[r][k].byStart {
					if rd.Ver >= v && rd.End > lastOldEnd {
						first = min(first, rd.End)
					}
				}
				switch {
				case first == math.MaxInt64:
					// Not served by the end of the run: at least that long.
					convUnmeasured++
					conv = max(conv, in.End-in.ThawAt)
				case first <= in.ThawAt:
				default:
					conv = max(conv, first-in.ThawAt)
				}
			}
		}
		out["converge_after_thaw_ms"] = msOf(conv)
		out["converge_after_thaw_last_old_ms"] = msOf(convLo)
		out["converge_unmeasured"] = float64(convUnmeasured)
	}

	// When each reader heard the stream again after the thaw, had its
	// breaker closed and saw every node ready (the latest reader; 0 when
	// that was so at the thaw), and the writer's; a flag that never came
	// back counts the time to the end of the run.
	afterThaw := func(name string, edges []flagEdge) {
		d, ok := onAfter(edges, in.ThawAt)
		if !ok {
			d = in.End - in.ThawAt
		}
		out[name] = max(out[name], msOf(d))
	}
	for _, f := range in.Flags {
		for flag, name := range map[string]string{"stream": "stream_heard_after_thaw_ms",
			"breaker": "breaker_closed_after_thaw_ms", "nodes": "nodes_ready_after_thaw_ms"} {
			if edges, ok := f[flag]; ok {
				afterThaw(name, edges)
			}
		}
	}
	for flag, name := range map[string]string{"breaker": "writer_breaker_closed_after_thaw_ms",
		"nodes": "writer_nodes_ready_after_thaw_ms"} {
		if edges, ok := in.WriterFlags[flag]; ok {
			afterThaw(name, edges)
		}
	}
	return out
}

// quantile returns the q-quantile of sorted by nearest rank; 0 when empty.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
