package redis_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/redis"
)

// The chaos test's configuration. The policy is the one the staleness
// bounds in TestChaos's comment are computed from.
const (
	chaosProcs       = 3    // independent Caches, each over its own Tier
	chaosKeys        = 300  // keys, read with Zipf popularity (s = 1.1)
	chaosHotKeys     = 10   // the most popular keys, half of the invalidations
	chaosRate        = 1000 // reads a second per process
	chaosReaders     = 6    // reading goroutines per process
	chaosInvalidRate = 20   // invalidations a second
	chaosWriter      = 0    // the process whose namespace the writer invalidates through
	chaosLatencyMax  = 250 * time.Millisecond
	// chaosLeaseBound is the latency bound of reads where Redis may lose
	// acknowledged writes (losesWrites): a lease lost with them holds its
	// key's readers as a dead holder's would, Lease.TTL (LoadTimeout by
	// default) then one LoadTimeout of their own load.
	chaosLeaseBound  = 2*time.Second + chaosLatencyMax
	chaosReadTimeout = 10 * time.Second // a reader gives up (and counts an error) past this
	chaosHealTimeout = 60 * time.Second // one wait for the cluster to heal
)

var chaosPolicy = holdfast.Policy{
	TTL:          4 * time.Second,
	SoftTTL:      3 * time.Second,
	StaleIfError: 4 * time.Second,
	LoadTimeout:  time.Second,
	Lease:        holdfast.LeasePolicy{Enabled: true}, // TTL and poll: the defaults
	Hot:          holdfast.HotPolicy{TTL: 500 * time.Millisecond, Share: true},
}

var chaosSeedFlag = flag.Uint64("chaos.seed", 0, "TestChaos: replay this seed of the fault schedule (also HOLDFAST_CHAOS_SEED)")

// TestChaos is a randomized fault test of the public API on a real Redis
// Cluster (3 primaries + 3 replicas). Three client "processes" — each an
// independent holdfast.Cache over its own redis.Tier, so with their own
// connections, breaker, node health, hot tier and last-known-good store, but
// all in this one OS process — read about 1,000 times a second each
// (Policy.Lease on) over 300 keys of Zipf popularity, so that a few keys are
// hot enough to enter the hot tier and be smeared. A writer bumps a
// versioned fake source of truth about 20 times a second and then calls
// Namespace.Invalidate through process 0. Meanwhile a seeded random schedule
// injects, one at a time and waiting for the cluster to heal (cluster_state
// ok, replicas in sync, one agreed slot map) after each node fault:
//
//   - phase 1: a node frozen (SIGSTOP) for 1–5 s; a node killed (SIGKILL) and
//     restarted empty after 0.5–3 s; a replica killed and restarted with the
//     snapshot it had (a primary never is: one that comes back from an old
//     snapshot before its replica took over has lost the deletes, which no
//     cache can hide); the database slow (200–800 ms a load) or failing for
//     1.5–3 s;
//   - phase 2: 100–2,000 slots resharded between two primaries (redis-cli
//     --cluster reshard); CLUSTER FAILOVER and CLUSTER FAILOVER TAKEOVER on a
//     replica; a fourth primary added with 100–2,000 slots, then drained and
//     removed. Runs shorter than a minute move 100–600 slots at a time, as
//     redis-cli moves about 150 slots a second under this traffic.
//
// Every kind runs at least once per phase; the rest of each phase is drawn
// at random. Every read is checked (chaos_check_test.go), with the bounds the
// README states for the policy above (TTL 4 s, soft 3 s, stale-if-error 4 s,
// LoadTimeout 1 s, Hot.TTL 500 ms, ReadBudget 50 ms):
//
//   - read-your-invalidations: in the writer's process, a read that began
//     after Invalidate returned never gets the version it superseded;
//   - in the other processes, a superseded version only from: the shared
//     tier until its delete landed (Invalidate returned with nothing queued
//     for replay, or the replay queue drained) + 100 ms of replica lag; the
//     hot tier until Hot.TTL after its latest possible store (the end of a load that
//     began before the supersession, LoadTimeout + 250 ms, or a shared
//     read before the delete landed); a load that read the source
//     before the supersession (LoadTimeout + 250 ms);
//   - everywhere: hot, shared and local answers before their soft time,
//     stale ones before hard, stale-on-error ones within hard +
//     stale-if-error (50 ms of clock slack), and no origin later than the
//     moment the value was superseded in the source;
//   - no error outside the database faults (and their 1 s settle time), and
//     no error while the process held a value within its stale-if-error
//     window (every value served went into its last-known-good store);
//   - the max latency of the reads outside the database faults ≤ 250 ms,
//     less the time the whole process was not scheduled meanwhile (a
//     goroutine ticking every millisecond measures those stalls; the table
//     shows the raw max beside it). Reads that began during a database
//     fault, in the 1 s after it or less than 250 ms before it are reported
//     apart; so are reads around a fault in which Redis may drop writes it
//     acknowledged (a primary killed and restarted empty, a TAKEOVER), which
//     may take a lease or its release with them: those are bounded by
//     Lease.TTL + LoadTimeout (+ 250 ms), as for a lease's dead holder;
//   - no panic; no goroutine left once every Cache and Tier is closed.
//
// Answers served past their soft or hard time by more than the 50 ms slack
// but within a stall of the process are counted, not failed: holdfast's
// clock is a word refreshed every millisecond by a goroutine, which stands
// still while the process is not scheduled.
//
// A failure names the invariant, the key, the process, the versions, the
// times (seconds since the test began) and the faults active then. The
// table at the end (t.Log, and the file HOLDFAST_CHAOS_OUT when set) counts
// reads, errors, violations, latencies inside and outside database faults,
// breaker openings, ejections and faults by kind.
//
// The default run lasts about 30 s of traffic (both phases); a longer one:
//
//	HOLDFAST_CHAOS=120s go test -race -count=1 -run TestChaos -v ./redis
//
// A read still waiting after 2 s outside the database faults has every
// goroutine's stack written to a file while it waits (HOLDFAST_CHAOS_STALL
// sets the 2 s; the paths are logged).
//
// The seed is printed; HOLDFAST_CHAOS_SEED=N (or -args -chaos.seed=N)
// replays the same schedule of faults, keys and invalidations (timings, and
// so the interleavings, still differ from run to run).
func TestChaos(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found (scripts/install-test-deps.sh installs it): %v", bin, err)
		}
	}
	total := 30 * time.Second
	if s := os.Getenv("HOLDFAST_CHAOS"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("HOLDFAST_CHAOS=%q: want a duration such as 120s", s)
		}
		total = d
	}
	seed := *chaosSeedFlag
	if s := os.Getenv("HOLDFAST_CHAOS_SEED"); s != "" && seed == 0 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("HOLDFAST_CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	replay := fmt.Sprintf("HOLDFAST_CHAOS_SEED=%d HOLDFAST_CHAOS=%v go test -race -count=1 -run TestChaos -v ./redis", seed, total)
	t.Logf("seed %d; replay: %s", seed, replay)

	cl := redistest.Cluster(t)
	// Measured once the servers' own goroutines (one per process) exist.
	goroutinesBefore := runtime.NumGoroutine()
	stacksBefore := goroutineStacks()

	db := newChaosDB(chaosKeys, chaosProcs)
	procs := make([]*chaosProc, chaosProcs)
	for i := range procs {
		procs[i] = newChaosProc(t, i, cl.Addrs(), db)
	}
	closeAll := sync.OnceFunc(func() {
		for _, p := range procs {
			if p != nil {
				p.close()
			}
		}
	})
	t.Cleanup(closeAll) // also when the test stops early

	epoch := time.Now()
	sched := &chaosScheduler{
		t: t, cl: cl, db: db, epoch: epoch, heal: chaosHealTimeout,
		rng:  rand.New(rand.NewPCG(seed, 1)),
		logf: t.Logf, maxSlots: 2000, addrs: cl.Addrs(),
	}
	if total < time.Minute {
		sched.maxSlots = 600
	}

	probes := newChaosProbes(sched.nodeAddrs)
	for _, p := range procs {
		p.probes, p.db = probes, db
	}

	// Traffic runs from before the first fault to after the last; it is
	// bounded by count and by a hard deadline in case the schedule hangs.
	stop := make(chan struct{})
	hardEnd := time.Now().Add(3*total + 5*time.Minute)
	maxReads := int(float64(chaosRate)/chaosReaders*(3*total+5*time.Minute).Seconds()) + 1
	var wg sync.WaitGroup
	results := make([][]chaosRead, chaosProcs*chaosReaders)
	watch, err := newChaosStallWatch(db, sched, len(results), seed)
	if err != nil {
		t.Fatal(err)
	}
	for pi, p := range procs {
		for r := 0; r < chaosReaders; r++ {
			slot := pi*chaosReaders + r
			rng := rand.New(rand.NewPCG(seed, uint64(100+slot)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[slot] = p.readLoop(rng, stop, hardEnd, maxReads, watch, slot)
			}()
		}
	}
	var watchErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchErr = watch.run(stop, hardEnd)
	}()
	var writes chaosWriteStats
	wg.Add(1)
	go func() {
		defer wg.Done()
		writes = chaosWrite(procs[chaosWriter].ns, db, rand.New(rand.NewPCG(seed, 2)), stop, hardEnd)
	}()
	samples := newChaosSamples(procs)
	stalls := &redistest.Stalls{}
	wg.Add(2)
	go func() {
		defer wg.Done()
		samples.run(stop, hardEnd)
	}()
	go func() {
		defer wg.Done()
		stalls.Run(stop, hardEnd)
	}()

	// Warm-up: every process loads its keys and finds the hot ones.
	time.Sleep(2 * time.Second)
	phase1End := time.Now().Add(total / 2)
	sched.phase(1, []string{faultFreeze, faultKill, faultKillData, faultDBSlow, faultDBFailing},
		[]string{faultFreeze, faultFreeze, faultKill, faultKillData, faultDBSlow, faultDBFailing}, phase1End)
	phase2Start := time.Now()
	if sched.failed == nil {
		sched.phase(2, []string{faultReshard, faultFailover, faultTakeover, faultAdd, faultRemove},
			[]string{faultReshard, faultReshard, faultFailover, faultTakeover, faultAdd}, phase2Start.Add(total/2))
	}
	time.Sleep(2 * time.Second) // the last fault's settle time, under traffic
	close(stop)
	wg.Wait()
	probes.wait()
	trafficEnd := time.Now()
	landPending(procs[chaosWriter].ns, db)

	// Stats before Close, which stops the counters' sources.
	final := make([]chaosProcStats, len(procs))
	for i, p := range procs {
		final[i] = chaosProcStats{ns: p.ns.Stats(), tier: p.tier.Stats()}
	}
	closeAll()
	leaked := waitGoroutines(goroutinesBefore, 10*time.Second)

	var reads []chaosRead
	for _, rs := range results {
		reads = append(reads, rs...)
	}
	chk := newChaosChecker(chaosBounds{
		writer: chaosWriter, ttl: chaosPolicy.TTL, sie: chaosPolicy.StaleIfError,
		hotTTL: chaosPolicy.Hot.TTL, loadTimeout: chaosPolicy.LoadTimeout,
		readBudget: redis.DefaultReadBudget, latencyLimit: chaosLatencyMax,
	}, db, sched, reads, stalls, samples)
	chk.probes = probes
	checkStart := time.Now()
	chk.check()

	rep := chaosReport{
		seed: seed, total: total, wall: trafficEnd.Sub(epoch), phase2: phase2Start.UnixNano(),
		chk: chk, writes: writes, samples: samples, final: final, db: db,
		goroutinesBefore: goroutinesBefore, leaked: leaked,
	}
	table := rep.table()
	t.Logf("checked %d reads in %v", len(reads), time.Since(checkStart).Round(time.Millisecond))
	t.Log("\n" + table)
	if out := os.Getenv("HOLDFAST_CHAOS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
			t.Errorf("HOLDFAST_CHAOS_OUT: %v", err)
		}
	}

	for _, r := range rep.slowOutside(5) {
		t.Logf("slow read outside database faults: %s", chk.describeRead(r))
	}
	if watchErr != nil {
		t.Errorf("goroutine dump of a stalled read: %v", watchErr)
	}
	for _, path := range watch.dumps {
		t.Logf("a read waited over %v: every goroutine's stack then is in %s", watch.after, path)
	}

	// Failures, each naming what broke.
	const maxShown = 25
	for i, v := range chk.viol {
		if i == maxShown {
			t.Errorf("... and %d more violations", len(chk.viol)-maxShown)
			break
		}
		t.Error(chk.describe(v))
		if i < 3 {
			t.Log(chk.history(v.read, 2*time.Second))
		}
	}
	if slow := rep.slowOutside(1); len(slow) > 0 && chk.netLatency(slow[0]) > chaosLatencyMax {
		t.Errorf("latency: max read latency outside database faults and lost writes, net of process stalls, %v > %v: %s",
			chk.netLatency(slow[0]), chaosLatencyMax, chk.describeRead(slow[0]))
	}
	if slow := rep.slowInWriteLoss(1); len(slow) > 0 && chk.netLatency(slow[0]) > chaosLeaseBound {
		t.Errorf("latency: max read latency where Redis may lose writes, net of process stalls, %v > Lease.TTL + LoadTimeout (%v): %s",
			chk.netLatency(slow[0]), chaosLeaseBound, chk.describeRead(slow[0]))
	}
	if leaked > 0 {
		t.Errorf("%d goroutines left after every Cache and Tier was closed (%d before):\n%s",
			leaked, goroutinesBefore, diffGoroutines(stacksBefore, goroutineStacks()))
	}
	if sched.failed != nil {
		t.Errorf("harness: the cluster did not heal, the schedule stopped early: %v", sched.failed)
	}
	if t.Failed() {
		t.Logf("seed %d; replay: %s", seed, replay)
	}
}

// chaosProc is one client "process": its own Tier, Cache and namespace.
type chaosProc struct {
	id     int
	tier   *redis.Tier
	cache  *holdfast.Cache
	ns     *holdfast.Namespace
	loader holdfast.Loader
	db     *chaosDB
	probes *chaosProbes
}

var chaosQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newChaosProc(t *testing.T, id int, addrs []string, db *chaosDB) *chaosProc {
	t.Helper()
	tr, err := redis.New(redis.Options{Addrs: addrs, KeyPrefix: "chaos:"})
	if err != nil {
		t.Fatalf("process %d: redis.New: %v", id, err)
	}
	c, err := holdfast.New(holdfast.Options{
		Shared:             tr,
		MaxConcurrentLoads: 64, // the limiter is not under test: no rejections from it
		HotShareInterval:   time.Second,
		Logger:             chaosQuiet,
	})
	if err != nil {
		tr.Close()
		t.Fatalf("process %d: holdfast.New: %v", id, err)
	}
	ns, err := c.Namespace("chaos", chaosPolicy)
	if err != nil {
		c.Close()
		tr.Close()
		t.Fatalf("process %d: Namespace: %v", id, err)
	}
	return &chaosProc{id: id, tier: tr, cache: c, ns: ns, loader: db.loader(id)}
}

// close closes the Cache, then the Tier it does not own. Safe to call twice.
func (p *chaosProc) close() {
	p.cache.Close()
	p.tier.Close()
}

// readLoop reads at chaosRate/chaosReaders a second until stop, hardEnd or
// maxReads.
func (p *chaosProc) readLoop(rng *rand.Rand, stop <-chan struct{}, hardEnd time.Time, maxReads int, watch *chaosStallWatch, slot int) []chaosRead {
	zipf := rand.NewZipf(rng, 1.1, 1, chaosKeys-1)
	tk := time.NewTicker(time.Second * chaosReaders / chaosRate)
	defer tk.Stop()
	out := make([]chaosRead, 0, 4096)
	for n := 0; n < maxReads; n++ {
		select {
		case <-stop:
			return out
		case <-tk.C:
		}
		if time.Now().After(hardEnd) {
			return out
		}
		key := int(zipf.Uint64())
		watch.begin(slot, key)
		r := p.read(key)
		watch.end(slot)
		p.probes.suspect(p.db, &r, chaosWriter)
		out = append(out, r)
	}
	return out
}

func (p *chaosProc) read(key int) (r chaosRead) {
	name := chaosKeyName(key)
	r.key, r.proc = uint16(key), uint8(p.id)
	ctx, cancel := context.WithTimeout(context.Background(), chaosReadTimeout)
	defer cancel()
	var res holdfast.Result
	var err error
	r.begin = time.Now().UnixNano()
	func() {
		defer func() {
			if v := recover(); v != nil {
				buf := make([]byte, 8<<10)
				err = fmt.Errorf("panic: %v\n%s", v, buf[:runtime.Stack(buf, false)])
				r.errKind = chaosErrPanic
			}
		}()
		res, err = p.ns.Get(ctx, name, p.loader)
	}()
	r.end = time.Now().UnixNano()
	if err != nil {
		if r.errKind == chaosOK {
			r.errKind = classifyChaosErr(err, ctx.Err() != nil)
		}
		r.errMsg = err.Error()
		return r
	}
	r.src, r.why, r.stale, r.collapsed = res.Source, res.Reason, res.Stale(), res.Collapsed
	r.origin, r.soft, r.hard = res.Origin().UnixNano(), res.Soft().UnixNano(), res.Hard().UnixNano()
	k, v, ok := parseChaosValue(res.Value)
	switch {
	case !ok:
		r.errKind, r.errMsg = chaosErrBadValue, fmt.Sprintf("value %q does not parse (source %s)", res.Value, res.Source)
	case k != name:
		r.errKind, r.errMsg = chaosErrBadValue, fmt.Sprintf("value of key %s served for %s (source %s)", k, name, res.Source)
	default:
		r.ver = v
	}
	return r
}

type chaosWriteStats struct {
	invalidations, queued, errors int
	maxLatency                    time.Duration
}

// chaosWrite bumps a key in the source and invalidates it, chaosInvalidRate
// times a second, half of them on the hot keys, until stop or hardEnd.
func chaosWrite(ns *holdfast.Namespace, db *chaosDB, rng *rand.Rand, stop <-chan struct{}, hardEnd time.Time) (st chaosWriteStats) {
	tk := time.NewTicker(time.Second / chaosInvalidRate)
	defer tk.Stop()
	limit := int((3 * time.Hour).Seconds()) * chaosInvalidRate // hardEnd comes long before
	for n := 0; n < limit; n++ {
		select {
		case <-stop:
			return st
		case <-tk.C:
		}
		now := time.Now()
		if now.After(hardEnd) {
			return st
		}
		if ns.Stats().Get("pending_deletes") == 0 {
			db.landAll(now.UnixNano())
		}
		i := rng.IntN(chaosKeys)
		if rng.IntN(2) == 0 {
			i = rng.IntN(chaosHotKeys)
		}
		v := db.bump(i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := ns.Invalidate(ctx, chaosKeyName(i))
		ret := time.Now()
		cancel()
		queued := ns.Stats().Get("pending_deletes") > 0
		db.recordInvalidation(i, v, start.UnixNano(), ret.UnixNano(), queued, err)
		st.invalidations++
		if queued {
			st.queued++
		}
		if err != nil {
			st.errors++
		}
		st.maxLatency = max(st.maxLatency, ret.Sub(start))
	}
	return st
}

// landPending waits, bounded, for the writer's replay queue to drain, so
// that the invalidations queued at the end have a landing time.
func landPending(ns *holdfast.Namespace, db *chaosDB) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ns.Stats().Get("pending_deletes") == 0 {
			db.landAll(time.Now().UnixNano())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type chaosProcStats struct {
	ns   holdfast.Stats
	tier redis.Stats
}

// chaosSamples polls what is only visible as a gauge or per node: node
// ejections (a node's counters leave NodeStats with the node) and how many
// keys each process finds hot.
type chaosSamples struct {
	procs     []*chaosProc
	mu        sync.Mutex
	ejections map[string]uint64 // proc/addr → max Ejections seen
	maxHot    []int
	hot       []chaosHotSample // bounded by the sampling loop's count
	opens     []uint64         // BreakerOpens per process, last seen
	openedAt  [][2]int64       // [process, when] of each opening seen
	// stream is each process's invalidation stream, sampled every
	// chaosStreamEvery: its changes only, for the failure messages.
	stream     [][]chaosStreamSample
	lastStream []chaosStreamSample
}

// chaosStreamSample is a process's invalidation stream as its Cache sees
// it: heard or not, and how many losses its tier had reported.
type chaosStreamSample struct {
	at     int64
	heard  bool
	losses uint64
}

// chaosStreamEvery is how often the streams' states are sampled.
const chaosStreamEvery = 10 * time.Millisecond

// chaosHotSample is which keys each process found hot at one moment, for
// the failure messages (a hot key is read from its smeared copies).
type chaosHotSample struct {
	at  int64
	hot []map[string]bool
}

func newChaosSamples(procs []*chaosProc) *chaosSamples {
	return &chaosSamples{procs: procs, ejections: map[string]uint64{}, maxHot: make([]int, len(procs)), opens: make([]uint64, len(procs)),
		stream: make([][]chaosStreamSample, len(procs)), lastStream: make([]chaosStreamSample, len(procs))}
}

// sampleStreams records each process's stream state where it changed.
func (s *chaosSamples) sampleStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	for i, p := range s.procs {
		st := chaosStreamSample{at: now, heard: testhook.StreamHeard(p.cache), losses: p.tier.Stats().StreamLosses}
		if last := s.lastStream[i]; last.at == 0 || last.heard != st.heard || last.losses != st.losses {
			s.stream[i] = append(s.stream[i], st)
		}
		s.lastStream[i] = st
	}
}

// streamBetween describes proc's stream from its state at from to its
// changes up to to.
func (s *chaosSamples) streamBetween(sched *chaosScheduler, proc int, from, to int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for i, st := range s.stream[proc] {
		if st.at > to {
			break
		}
		if next := i + 1; st.at < from && next < len(s.stream[proc]) && s.stream[proc][next].at <= from {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s (%d losses)", sched.rel(st.at), map[bool]string{true: "heard", false: "unheard"}[st.heard], st.losses)
	}
	return b.String()
}

// hotAt says whether key was hot in process proc at the sample nearest t.
func (s *chaosSamples) hotAt(proc int, key string, t int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.hot), func(i int) bool { return s.hot[i].at >= t })
	switch {
	case len(s.hot) == 0:
		return "unknown"
	case i == len(s.hot):
		i--
	case i > 0 && t-s.hot[i-1].at < s.hot[i].at-t:
		i--
	}
	if s.hot[i].hot[proc][key] {
		return "hot (smeared)"
	}
	return "not hot"
}

func (s *chaosSamples) run(stop <-chan struct{}, hardEnd time.Time) {
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	st := time.NewTicker(chaosStreamEvery)
	defer st.Stop()
	for n := 0; n < 10_000_000; n++ {
		select {
		case <-stop:
			s.sample()
			return
		case <-st.C:
			s.sampleStreams()
			continue
		case <-tk.C:
		}
		if time.Now().After(hardEnd) {
			return
		}
		s.sample()
	}
}

func (s *chaosSamples) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	hs := chaosHotSample{at: time.Now().UnixNano(), hot: make([]map[string]bool, len(s.procs))}
	for i, p := range s.procs {
		for _, n := range p.tier.NodeStats() {
			k := fmt.Sprintf("%d/%s", i, n.Addr)
			s.ejections[k] = max(s.ejections[k], n.Ejections)
		}
		if o := p.tier.Stats().BreakerOpens; o > s.opens[i] {
			for range o - s.opens[i] {
				s.openedAt = append(s.openedAt, [2]int64{int64(i), hs.at})
			}
			s.opens[i] = o
		}
		keys := p.ns.Stats().HotKeys()
		s.maxHot[i] = max(s.maxHot[i], len(keys))
		hs.hot[i] = make(map[string]bool, len(keys))
		for _, k := range keys {
			hs.hot[i][k.Key] = true
		}
	}
	s.hot = append(s.hot, hs)
}

func (s *chaosSamples) totalEjections() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, e := range s.ejections {
		n += e
	}
	return n
}
