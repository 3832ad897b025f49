package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
)

// hot-key-warm-start: how soon a process started during a hot-key spike
// serves the hot keys from its own memory, with holdfast's warm start
// (Hot.Share) and without it.
//
// A scenario of its own rather than a variant of hot-key (hotkey.go): that
// one is one process driven by Traffic, and a warm start only happens in a
// process that starts while others run and share their hot keys through
// Redis. The processes are the lab's executable in child mode, as
// update-propagation's readers are (crossprocess.go), each with its own
// Cache (or naive client), its own Redis connections and its own source
// (12 ms, at most 10 loads at once, like every lab source).
//
// The traffic is the hot-key spike's, 2,000 req/s with 80% of the requests
// on hot keys and the rest uniform over 10,000 keys, except that the 80% is
// spread evenly over 10 hot keys (a sale's front page) instead of one viral
// key. With one key, each process reads it ~400 times a second, and the
// hot-key detector alone (1,000 reads a minute, 2 s half-life) promotes it
// in about 0.1 s: a process started cold would match the others within its
// first 5 s as well, and the figure could not tell what the warm start
// does. With 10 keys each one is read ~40 times a second per process (2.4
// times the threshold), which the detector needs ~1.6 s to promote; that is
// the gap the warm start is there to close. The split is fixed before
// measuring; the bar is not what chose it.
//
// Three reader processes serve the traffic from the start (request i goes
// to process i mod 3). At late_start_s (10 s of the default 20) the
// requests are split four ways (i mod 4), the fourth share going to a late
// process: its Cache (Redis connections, namespace, warm start) is built at
// that moment, and it serves its share from then on. A control process,
// the same but for Hot.NoWarmStart, is built at the same moment and reads
// the same requests as the late one at the same times (a mirror: the two
// late processes' shares are of the same reads; the older processes' load
// is that of four processes). The late processes are launched with the
// others before the run and wait, so the figure is of the Cache's start and
// not of the executable's: a pod's exec and runtime start come before its
// Cache is built, and do not change what its hot tier holds.
//
// holdfast: library defaults (hot keys detected at 1,000 reads a minute,
// 2 s half-life; HotShareInterval 5 s, what users get) with Hot.Share on in
// every process. The older processes start together just before the run,
// so they have published their hot keys at their 5 s exchange before the
// late one starts at 10 s. Values live 1 minute (hot-key's TTL), so none
// reaches its soft time (48 s) within the default run.
//
// naive: the two-level cache update-propagation runs (a local map whose
// entries live 10 s in front of cache-aside over Redis); it has no warm
// start, so its two late processes are alike, and its local map takes
// every key at its first read.
//
// Figures (see warmStartFigures), over the late process's first 5 s (the
// requests scheduled in [late_start_s, late_start_s + window_s)):
//   - warm_start_hot_share, cold_start_hot_share: the share of the late
//     process's (the control's) reads answered by its in-process tier
//     (holdfast: Result.Source == SourceHot; naive: the local map);
//     older_hot_share: the mean of the older processes' shares, each over
//     its own reads in the same window (_min, _max: the lowest and highest).
//   - warm_start_hot_share_ratio, cold_start_hot_share_ratio: each late
//     share over older_hot_share (absent when that is 0).
//   - the same three shares over the window's first second (_first_s).
//   - warm_start_keys, warm_start_bytes: the late process's Stats
//     (WarmStartKeys, WarmStartBytes); cold_start_warm_start_keys the
//     control's (0). warm_start_last_key_ms: from late_start_s to the last
//     growth of WarmStartKeys (sampled every 5 ms); late_cache_built_ms,
//     cold_cache_built_ms: from late_start_s to the Cache being built.
//   - hot_tier_share: every process's whole run, the mirror's included.
//
// The other extras are every process's mode figures summed (the control's
// included), as update-propagation's are.

const (
	warmOlder       = 3
	warmRate        = 2000.0
	warmHotKeys     = 10
	warmDuration    = 20 * time.Second
	warmLateAt      = 10 * time.Second
	warmWindow      = 5 * time.Second
	warmLocalTTL    = 10 * time.Second
	warmChildKind   = "warm-start"
	warmConfigEnv   = "HOLDFAST_LAB_WARM_START"
	warmRoleOlder   = "older"
	warmRoleLate    = "late"
	warmRoleControl = "control"
)

func hotKeyWarmStart(o Options) Plan {
	d := o.length(warmDuration)
	late, win := warmStartWindows(d)
	p := map[string]any{
		"older_processes": warmOlder, "late_processes": 1, "control_processes": 1,
		"process_start": "the lab's executable in child mode, one per process, all launched before the run; a late process builds its Cache at late_start_s",
		"rate_per_s":    warmRate, "hot_keys": warmHotKeys, "hot_key_share": hotShare, "keys": hotKeyCount,
		"traffic":   "hot_key_share of the requests spread evenly over hot_keys, the rest uniform over keys; request i to older process i mod 3 before late_start_s, i mod 4 from then (the 4th share: the late process, mirrored by the control)",
		"loader_ms": ms(baseLoader), "loader_cap": baseCap, "loader_queue": 0,
		"ttl_s": hotTTL.Seconds(), "stale_if_error_s": (30 * time.Minute).Seconds(), "redis_timeout_ms": 100,
		"duration_s":    d.Seconds(),
		"late_start_s":  late.Seconds(),
		"window_s":      []float64{win[0].Seconds(), win[1].Seconds()},
		"fault":         "none: a process started during the spike",
		"fault_start_s": win[0].Seconds(), "fault_end_s": win[1].Seconds(),
		"latency_from":       "scheduled start (open model)",
		"redis_server":       "cluster of 3 primaries + 3 replicas, fresh per mode",
		"naive_redis_client": "rueidis cluster client, no client-side cache, no retries",
		"naive_local_ttl_s":  warmLocalTTL.Seconds(),
		"naive_config":       "a local map whose entries live naive_local_ttl_s in front of cache-aside over Redis; no warm start (the control is the same as the late process)",
		"holdfast_config":    holdfastConfig + " (hot keys above 1,000 reads a minute, 2 s half-life); Hot.Share on, HotShareInterval 5 s (the default); the control: Hot.NoWarmStart",
	}
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		return warmStartRun(ctx, o, m, d, late, win)
	}
	return Plan{Params: p, Duration: d, Window: win, RunMode: run,
		Figure: "holdfast: warm_start_hot_share_ratio ≥ 0.8 (the late process's hot-tier share in its first 5 s over the older processes'), beside cold_start_hot_share_ratio (Hot.NoWarmStart)"}
}

// warmStartWindows returns when the late process starts (10 s, or half a
// shorter run) and the window the figures are of: its first 5 s, or a
// quarter of a shorter run.
func warmStartWindows(d time.Duration) (late time.Duration, win [2]time.Duration) {
	late = min(warmLateAt, d/2).Round(time.Millisecond)
	w := min(warmWindow, d/4).Round(time.Millisecond)
	return late, [2]time.Duration{late, late + w}
}

// warmStartSchedule is the spike's reads, from a fixed seed.
func warmStartSchedule(d time.Duration) []Request {
	rng := rand.New(rand.NewPCG(13, 13))
	return ConstantRate(warmRate, d, func(int) string {
		if rng.Float64() < hotShare {
			return "product:hot:" + strconv.Itoa(rng.IntN(warmHotKeys))
		}
		return "product:" + strconv.Itoa(rng.IntN(hotKeyCount))
	})
}

// warmStartOwner returns which process serves request i, due at: an older
// process 0..warmOlder-1, or warmOlder for the late one (and its control).
func warmStartOwner(i int, at, late time.Duration) int {
	if at < late {
		return i % warmOlder
	}
	return i % (warmOlder + 1)
}

// warmChildConfig is what a process of the scenario is told, as JSON in its
// environment.
type warmChildConfig struct {
	Mode     string           `json:"mode"`
	Addrs    []string         `json:"addrs"`
	Role     string           `json:"role"`   // warmRoleOlder, warmRoleLate, warmRoleControl
	Reader   int              `json:"reader"` // an older process's index
	Duration time.Duration    `json:"duration"`
	Late     time.Duration    `json:"late"`
	Window   [2]time.Duration `json:"window"`
}

func (c warmChildConfig) readerConfig(load func(context.Context, string) ([]byte, error)) ReaderConfig {
	return ReaderConfig{
		RedisAddrs: c.Addrs, Load: load, LoadCap: baseCap,
		TTL: hotTTL, StaleIfError: 30 * time.Minute, Timeout: 100 * time.Millisecond,
		HotShare: true, NoWarmStart: c.Role == warmRoleControl, LocalTTL: warmLocalTTL,
	}
}

// warmChildMsg is one line a process writes after its run: reads in
// chunks, then Done with its figures.
type warmChildMsg struct {
	// Reads: [scheduled offset ns, latency from the scheduled start ns,
	// 1 if the in-process tier answered, Outcome].
	Reads [][4]int64 `json:"reads,omitempty"`
	// A late process's: from the scheduled start to its Cache built, and
	// to the last growth of its WarmStartKeys (0: none seen).
	BuiltNS       int64 `json:"built_ns,omitempty"`
	WarmLastKeyNS int64 `json:"warm_last_key_ns,omitempty"`
	childTotals
}

// warmRead is one read of a process.
type warmRead struct {
	At    time.Duration // scheduled offset from the start
	Lat   time.Duration // from the scheduled start
	Local bool          // answered by the in-process tier
	Out   Outcome
}

func warmStartRun(ctx context.Context, o Options, m Mode, d, late time.Duration, win [2]time.Duration) (res ModeResult, err error) {
	c, err := StartCluster(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, c.Close()) }()

	// Building the mode here first reports a missing mode before any
	// process is started.
	probe, err := m.New(ctx, ReaderConfig{RedisAddrs: c.Addrs(), Load: func(context.Context, string) ([]byte, error) { return nil, nil },
		TTL: hotTTL, LocalTTL: warmLocalTTL})
	if err != nil {
		return res, err
	}
	if err := probe.Close(); err != nil {
		return res, err
	}

	cctx, cancel := context.WithTimeout(ctx, d+3*time.Minute)
	defer cancel()
	cfgs := make([]warmChildConfig, 0, warmOlder+2)
	for i := range warmOlder {
		cfgs = append(cfgs, warmChildConfig{Role: warmRoleOlder, Reader: i})
	}
	cfgs = append(cfgs, warmChildConfig{Role: warmRoleLate}, warmChildConfig{Role: warmRoleControl})
	for i := range cfgs {
		cfgs[i].Mode, cfgs[i].Addrs, cfgs[i].Duration, cfgs[i].Late, cfgs[i].Window = m.Name, c.Addrs(), d, late, win
	}
	procs, err := startReaderProcs(cctx, warmChildKind, warmConfigEnv, cfgs, 90*time.Second)
	defer func() { err = errors.Join(err, procs.close()) }()
	if err != nil {
		return res, err
	}
	ops0 := nodeOps(c)
	// CPU time is measured from here to the end of the schedule: the
	// reader processes' (the late ones' start included, the point of the
	// scenario) and this one's; not the older processes' warm-up, nor the
	// reports the processes send afterwards.
	start, meter, err := procs.begin(c.Nodes)
	defer meter.stop()
	if err != nil {
		return res, err
	}
	o.Progress.Begin(o.label(m), d)
	if wait := time.Until(start.Add(d)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	cpu := meter.stop()

	rec := NewRecorder(win[0], win[1])
	res.Extra = map[string]float64{}
	var older [][]warmRead
	var lateReads, controlReads []warmRead
	var loadsPerSecond []int64
	var hot, reads int64
	for i, k := range procs.kids {
		rs, done, err := receiveWarmStart(k)
		if err != nil {
			return res, fmt.Errorf("%s process %d: %w", cfgs[i].Role, i, err)
		}
		for _, r := range rs {
			rec.Record(r.At, r.Lat, r.Out)
			reads++
			if r.Local {
				hot++
			}
		}
		o.Progress.Add(int64(len(rs)))
		switch cfgs[i].Role {
		case warmRoleOlder:
			older = append(older, rs)
		case warmRoleLate:
			lateReads = rs
			res.Extra["warm_start_keys"] = done.Stats["hf_warm_start_keys"]
			res.Extra["warm_start_bytes"] = done.Stats["hf_warm_start_bytes"]
			res.Extra["late_cache_built_ms"] = ms(time.Duration(done.BuiltNS) - late)
			if done.WarmLastKeyNS > 0 {
				res.Extra["warm_start_last_key_ms"] = ms(time.Duration(done.WarmLastKeyNS) - late)
			}
		case warmRoleControl:
			controlReads = rs
			res.Extra["cold_start_warm_start_keys"] = done.Stats["hf_warm_start_keys"]
			res.Extra["cold_cache_built_ms"] = ms(time.Duration(done.BuiltNS) - late)
		}
		done.add(&res, &loadsPerSecond)
	}
	procs.clean = true
	if err := ctx.Err(); err != nil {
		return res, err
	}
	finishProcResult(&res, rec, d, loadsPerSecond, c, ops0)
	if reads > 0 {
		res.Extra["hot_tier_share"] = float64(hot) / float64(reads)
	}
	for name, v := range warmStartFigures(older, lateReads, controlReads, win) {
		res.Extra[name] = v
	}
	cpu.addTo(&res)
	return res, nil
}

// warmStartFigures computes the hot-tier shares of the late process, the
// control and the older processes over win and over its first second, and
// the late ones' ratios to the older processes' mean.
func warmStartFigures(older [][]warmRead, late, control []warmRead, win [2]time.Duration) map[string]float64 {
	out := map[string]float64{}
	share := func(rs []warmRead, w [2]time.Duration) (float64, bool) {
		var n, hot int
		for _, r := range rs {
			if r.At >= w[0] && r.At < w[1] {
				n++
				if r.Local {
					hot++
				}
			}
		}
		if n == 0 {
			return 0, false
		}
		return float64(hot) / float64(n), true
	}
	first := [2]time.Duration{win[0], min(win[1], win[0]+time.Second)}
	for _, w := range []struct {
		suffix string
		w      [2]time.Duration
	}{{"", win}, {"_first_s", first}} {
		var sum, lo, hi float64
		n := 0
		for _, rs := range older {
			s, ok := share(rs, w.w)
			if !ok {
				continue
			}
			if n == 0 || s < lo {
				lo = s
			}
			hi = max(hi, s)
			sum += s
			n++
		}
		if n == 0 {
			continue
		}
		mean := sum / float64(n)
		out["older_hot_share"+w.suffix] = mean
		if w.suffix == "" {
			out["older_hot_share_min"], out["older_hot_share_max"] = lo, hi
		}
		for _, l := range []struct {
			name string
			rs   []warmRead
		}{{"warm_start", late}, {"cold_start", control}} {
			s, ok := share(l.rs, w.w)
			if !ok {
				continue
			}
			out[l.name+"_hot_share"+w.suffix] = s
			if w.suffix == "" && mean > 0 {
				out[l.name+"_hot_share_ratio"] = s / mean
			}
		}
	}
	for _, l := range []struct {
		name string
		rs   []warmRead
	}{{"warm_start", late}, {"cold_start", control}} {
		n := 0
		for _, r := range l.rs {
			if r.At >= win[0] && r.At < win[1] {
				n++
			}
		}
		out[l.name+"_window_reads"] = float64(n)
	}
	return out
}

// receiveWarmStart reads a process's results.
func receiveWarmStart(k *child) ([]warmRead, warmChildMsg, error) {
	var reads []warmRead
	var done warmChildMsg
	err := receiveLines(k, func(msg *warmChildMsg) bool {
		for _, a := range msg.Reads {
			reads = append(reads, warmRead{At: time.Duration(a[0]), Lat: time.Duration(a[1]), Local: a[2] == 1, Out: Outcome(a[3])})
		}
		done = *msg
		return msg.Done
	})
	return reads, done, err
}

// warmStartChildMain is a process of hot-key-warm-start. An older process
// builds the mode over the Cluster with its own source, waits until it
// hears the invalidation stream (holdfast), prints "ready", and on
// "go START" (Unix ns) runs its share of the schedule from START. A late
// process (or the control) prints "ready" at once, and on "go START" waits
// until START + late, builds the mode then and runs its share of the
// schedule from there. Then each writes its reads and figures
// (warmChildMsg lines) and returns when stdin ends.
func warmStartChildMain(stdin io.Reader, stdout io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "holdfast-lab warm-start child: %v\n", err)
		return 1
	}
	var cfg warmChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(warmConfigEnv)), &cfg); err != nil {
		return fail(fmt.Errorf("config: %w", err))
	}
	lateRole := cfg.Role == warmRoleLate || cfg.Role == warmRoleControl
	if cfg.Duration <= 0 || (!lateRole && (cfg.Role != warmRoleOlder || cfg.Reader < 0 || cfg.Reader >= warmOlder)) {
		return fail(fmt.Errorf("bad config %+v", cfg))
	}
	mode, err := modeNamed(cfg.Mode)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	src := NewSource(SourceConfig{Latency: baseLoader, Cap: baseCap})
	var (
		r  Reader
		tr tieredReader
	)
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	build := func() error {
		var err error
		if r, err = mode.New(ctx, cfg.readerConfig(src.Load)); err != nil {
			return err
		}
		var ok bool
		if tr, ok = r.(tieredReader); !ok {
			return fmt.Errorf("mode %s does not say which reads its in-process tier answered", cfg.Mode)
		}
		return nil
	}
	if !lateRole {
		if err := build(); err != nil {
			return fail(err)
		}
		if err := waitHeard(r, 30*time.Second); err != nil {
			return fail(err)
		}
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
	src.Begin(start, cfg.Window[0], cfg.Window[1])
	owner := warmOlder
	if !lateRole {
		owner = cfg.Reader
	}
	var mine []Request
	for i, q := range warmStartSchedule(cfg.Duration) {
		if warmStartOwner(i, q.At, cfg.Late) == owner {
			mine = append(mine, q)
		}
	}

	var built time.Duration
	var lastKey time.Duration
	var sampler sync.WaitGroup
	if lateRole {
		time.Sleep(time.Until(start.Add(cfg.Late)))
		if err := build(); err != nil {
			return fail(err)
		}
		built = time.Since(start)
		// When the warm start put its last key in the hot tier: its
		// counter sampled over the window.
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			// One counter, not the whole Stats map: the sampler's own cost
			// lands in the process's CPU figure.
			keys := func() float64 { return 0 }
			if h, ok := r.(*holdfastReader); ok {
				keys = func() float64 { return float64(h.ns.Stats().Get("warm_start.keys")) }
			}
			var last float64
			for time.Now().Before(start.Add(cfg.Window[1])) {
				if k := keys(); k != last {
					last, lastKey = k, time.Since(start)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	reads := make([][4]int64, len(mine))
	Driver{MaxInFlight: 2000}.Run(ctx, start, mine, func(ctx context.Context, i int, late time.Duration, dropped bool) {
		q := mine[i]
		rec := [4]int64{int64(q.At), int64(late), 0, int64(Failed)}
		if !dropped {
			_, local, stale, err := tr.GetTiered(ctx, q.Key)
			rec[1] = int64(time.Since(start.Add(q.At)))
			if local {
				rec[2] = 1
			}
			rec[3] = int64(classify(stale, err))
		}
		reads[i] = rec
	})
	sampler.Wait()

	enc := json.NewEncoder(stdout)
	const chunk = 2000
	for i := 0; i < len(reads); i += chunk {
		if err := enc.Encode(warmChildMsg{Reads: reads[i:min(i+chunk, len(reads))]}); err != nil {
			return fail(err)
		}
	}
	total, win := src.Calls()
	done := warmChildMsg{BuiltNS: int64(built), WarmLastKeyNS: int64(lastKey), childTotals: childTotals{Done: true,
		Stats: r.Stats(), Loads: total, LoadsWindow: win, LoadsPerSecond: src.CallsPerSecond()}}
	if err := enc.Encode(done); err != nil {
		return fail(err)
	}
	for in.Scan() {
	}
	return 0
}
