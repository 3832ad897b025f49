package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

// The cluster scenarios, on the lab's 3 primaries + 3 replicas:
// node-freeze (one primary SIGSTOPped: how soon holdfast ejects it, and
// whether reads of the other nodes' keys notice) and replica-resync (a
// replica restarted empty: whether it answers reads before it has its data
// again). Both read 3,000 uniform keys at 300 req/s, warmed before the run
// so that the figures are of Redis, not of first loads; holdfast's hot tier
// is off so that every read goes to Redis. The naive mode (rueidis, no
// node health; reads from primaries only in node-freeze, from primaries and
// replicas in replica-resync) shows the before.
const (
	clusterRate = 300.0
	clusterKeys = 3000
	clusterTTL  = 5 * time.Minute
	// holdfastNamespace is the namespace of the holdfast mode (see
	// newHoldfastReader): it stores key as "lab:" + key.
	holdfastNamespace = "lab"
)

// storedKey returns how mode m names key in Redis.
func storedKey(m Mode) func(key string) string {
	if m.Name == "holdfast" {
		return func(key string) string { return holdfastNamespace + ":" + key }
	}
	return func(key string) string { return key }
}

// keyScale is how much a run is shortened (1 at the default length), for
// the key counts that set up a scenario: a smoke run must not fill 200,000.
func keyScale(o Options) float64 {
	return min(1, float64(o.length(baseDuration))/float64(baseDuration))
}

func clusterTraffic(d time.Duration, keys int) Traffic {
	return Traffic{
		Schedule: ConstantRate(clusterRate, d, uniformKeys("product", keys)),
		Duration: d,
		Window:   middleThird(d),
		Cluster:  true,
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader: ReaderConfig{TTL: clusterTTL, StaleIfError: 30 * time.Minute,
			Timeout: 100 * time.Millisecond, HotDisabled: true},
	}
}

func clusterParams(d time.Duration, w [2]time.Duration, keys int) map[string]any {
	return map[string]any{
		"rate_per_s": clusterRate, "keys": keys, "keys_warmed": true,
		"loader_ms": ms(baseLoader), "loader_cap": baseCap, "loader_queue": 0,
		"ttl_s": clusterTTL.Seconds(), "redis_timeout_ms": 100,
		"duration_s": d.Seconds(), "fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"latency_from":       "scheduled start (open model)",
		"reader_counters":    "hits, misses, hf_* and tier_* include the warm-up (one read per key before the run)",
		"redis_server":       "cluster of 3 primaries + 3 replicas, fresh per mode",
		"naive_redis_client": "rueidis cluster client, reads from primaries only, no client-side cache, no retries, no node health",
		"holdfast_config":    "library defaults with the hot tier off (every read goes to Redis); Redis tier defaults: 50 ms read budget, per-node ejection after 3 consecutive failures, 1 s silent-connection watchdog, replica readiness polled every 1 s, random reads over primary + ready replicas",
	}
}

// warm reads keys once through f.Reader with the source's latency off, then
// forgets those loads, so that the run starts with every key in Redis.
func warm(f *Fixture, keys []string, latency time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f.Source.SetLatency(0)
	defer f.Source.SetLatency(latency)
	const workers = 8 // under the source's cap of 10: no load refused
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < len(keys); i += workers {
				if _, _, err := f.Reader.Get(ctx, keys[i]); err != nil && errs[g] == nil {
					errs[g] = fmt.Errorf("warm %q: %w", keys[i], err)
				}
			}
		}()
	}
	wg.Wait()
	f.Source.ResetCounts()
	return errors.Join(errs...)
}

func productKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "product:" + strconv.Itoa(i)
	}
	return out
}

// waitNodesReady waits, at most limit, until the holdfast tier sees every
// node of the cluster ready; it returns how many are. A fresh cluster's
// replicas are left out of CLUSTER SLOTS until they have replicated
// something, so call it after the warm-up's writes. For another Reader it
// returns 0 at once.
func waitNodesReady(f *Fixture, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	for {
		st, ok := nodeStats(f.Reader)
		if !ok {
			return 0
		}
		ready := 0
		for _, s := range st {
			if s.State == redis.NodeReady {
				ready++
			}
		}
		if ready >= len(f.Cluster.Nodes) || time.Now().After(deadline) {
			return ready
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeFreeze: one primary SIGSTOPped for the middle half (10 s of 20 s)
// under 300 req/s over 3,000 keys. The cluster's own failure detection is
// slowed (cluster-node-timeout 15 s) so that the node stays a grey primary
// for the whole freeze instead of failing over: what the client does about
// it is what is measured. Figures: first_ejection_ms, from the freeze to
// the tier's LastEjected for that node; return_to_service_ms, from the thaw
// to the tier's calling the node ready again (its next probe succeeded);
// healthy_keys_p99_ratio, the p99 of reads of keys on the other primaries
// during the freeze over their p99 before it, in the same run.
func nodeFreeze(o Options) Plan {
	d := o.length(baseDuration)
	keys := max(300, int(clusterKeys*keyScale(o)))
	w := middleHalf(d)
	p := clusterParams(d, w, keys)
	p["fault"] = "SIGSTOP one primary at fault_start_s, SIGCONT at fault_end_s; cluster-node-timeout raised to 15 s so it does not fail over"
	p["healthy_keys_baseline"] = "keys on the other primaries, requests scheduled in [0, fault_start_s)"
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		r := &freezeRun{stored: storedKey(m), w: w, firstEjection: -1, backAfter: -1,
			base: NewRecorder(0, w[0]), during: NewRecorder(w[0], w[1])}
		t := clusterTraffic(d, keys)
		t.Window = w
		t.Setup = func(f *Fixture) error { return r.setup(f, keys) }
		t.Observe = r.observe
		t.Faults = []Fault{
			{At: w[0], Name: "freeze", Do: r.freeze},
			{At: w[1], Name: "thaw", Do: func(ctx context.Context, f *Fixture) error { return r.thaw(ctx, f, d) }},
		}
		t.Extra = r.extra
		return t.RunMode(ctx, o, m)
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: run,
		Figure: "first_ejection_ms ≤ 1000 (holdfast); healthy_keys_p99_ratio ≤ 1.5; window p99 ≤ 60 ms with 0 errors"}
}

// freezeRun is one mode's run of node-freeze.
type freezeRun struct {
	stored func(string) string
	w      [2]time.Duration

	frozen  *redistest.Process
	owner   [16384]string // slot → primary address, before the freeze
	healthy func(key string) bool

	base, during *Recorder // healthy keys only

	// Set on the fault goroutine, read by extra after it ended.
	freezeAt      time.Time
	ejections0    uint64
	firstEjection time.Duration // -1: not ejected during the freeze
	backAfter     time.Duration // from the thaw to ready; -1: not by the run's end
}

func (r *freezeRun) setup(f *Fixture, keys int) error {
	for _, n := range f.Cluster.Nodes {
		// A grey node, not a failover (see nodeFreeze).
		if _, err := Command(n.Addr(), time.Second, "CONFIG", "SET", "cluster-node-timeout", "15000"); err != nil {
			return fmt.Errorf("%s: CONFIG SET cluster-node-timeout: %w", n.Addr(), err)
		}
	}
	owner, err := slotOwners(f.Cluster.Nodes[0].Addr())
	if err != nil {
		return err
	}
	r.owner = owner
	// The primary of the first key's slot: a third of the keys, about.
	frozenAddr := owner[redis.Slot(r.stored("product:0"))]
	for _, n := range f.Cluster.Nodes {
		if n.Addr() == frozenAddr {
			r.frozen = n
		}
	}
	if r.frozen == nil {
		return fmt.Errorf("primary %s of product:0 not among the nodes", frozenAddr)
	}
	r.healthy = func(key string) bool { return r.owner[redis.Slot(r.stored(key))] != frozenAddr }
	if err := warm(f, productKeys(keys), baseLoader); err != nil {
		return err
	}
	waitNodesReady(f, 15*time.Second)
	// Past the tier's read-your-writes time after the warm-up's writes, so
	// that reads spread over the replicas again before the baseline.
	time.Sleep(redis.DefaultPrimaryAfterWrite + 100*time.Millisecond)
	if s, ok := nodeStat(f.Reader, frozenAddr); ok {
		r.ejections0 = s.Ejections
	}
	return nil
}

func (r *freezeRun) observe(f *Fixture, req Request, _ any, _ []byte, err error) {
	if !r.healthy(req.Key) {
		return
	}
	lat := time.Since(f.Start.Add(req.At))
	o := OK
	if err != nil {
		o = Failed
	}
	r.base.Record(req.At, lat, o)
	r.during.Record(req.At, lat, o)
}

// freeze stops the primary and, in the holdfast mode, watches the tier's
// figures for the node until it is ejected (or the freeze ends), so that
// LastEjected read then is the first ejection after the freeze.
func (r *freezeRun) freeze(ctx context.Context, f *Fixture) error {
	if err := r.frozen.Freeze(); err != nil {
		return err
	}
	r.freezeAt = time.Now()
	if _, ok := nodeStats(f.Reader); !ok {
		return nil
	}
	if s, ok := watchNode(ctx, f, r.frozen.Addr(), f.Start.Add(r.w[1]), func(s redis.NodeStats) bool { return s.Ejections > r.ejections0 }); ok {
		r.firstEjection = s.LastEjected.Sub(r.freezeAt)
	}
	return nil
}

// watchNode polls the tier's figures for the node at addr every 5 ms until
// cond holds for them (returning them), end passes or ctx ends.
func watchNode(ctx context.Context, f *Fixture, addr string, end time.Time, cond func(redis.NodeStats) bool) (redis.NodeStats, bool) {
	for time.Now().Before(end) {
		if s, ok := nodeStat(f.Reader, addr); ok && cond(s) {
			return s, true
		}
		select {
		case <-ctx.Done():
			return redis.NodeStats{}, false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return redis.NodeStats{}, false
}

// thaw resumes the primary and, in the holdfast mode, watches the tier's
// figures for the node until it is ready again or the run ends at d.
func (r *freezeRun) thaw(ctx context.Context, f *Fixture, d time.Duration) error {
	if err := r.frozen.Thaw(); err != nil {
		return err
	}
	thawAt := time.Now()
	if _, ok := nodeStats(f.Reader); !ok {
		return nil
	}
	if _, ok := watchNode(ctx, f, r.frozen.Addr(), f.Start.Add(d), func(s redis.NodeStats) bool { return s.State == redis.NodeReady }); ok {
		r.backAfter = time.Since(thawAt)
	}
	return nil
}

func (r *freezeRun) extra(f *Fixture, res *ModeResult) {
	b, d := r.base.Window(), r.during.Window()
	res.Extra["healthy_keys_p99_before_ms"] = b.P99
	res.Extra["healthy_keys_p99_freeze_ms"] = d.P99
	res.Extra["healthy_keys_requests_freeze"] = float64(d.Requests)
	res.Extra["healthy_keys_errors_freeze"] = float64(d.Errors)
	if b.P99 > 0 {
		res.Extra["healthy_keys_p99_ratio"] = d.P99 / b.P99
	}
	if s, ok := nodeStat(f.Reader, r.frozen.Addr()); ok {
		if r.firstEjection >= 0 { // left out when not ejected during the freeze
			res.Extra["first_ejection_ms"] = ms(r.firstEjection)
		}
		if r.backAfter >= 0 { // left out when not back by the run's end
			res.Extra["return_to_service_ms"] = ms(r.backAfter)
		}
		res.Extra["frozen_node_ejections"] = float64(s.Ejections - r.ejections0)
		res.Extra["frozen_node_watchdog_closes"] = float64(s.WatchdogCloses)
	}
}

// replicaResync: a replica restarted with empty memory at the start of the
// middle half, while its primary holds 200,000 keys (scaled down with the
// run), so that its full resync takes seconds (the primary's default
// repl-diskless-sync-delay alone is 5 s). Until it has its data, a replica
// answers every GET with a miss (replica-serve-stale-data). In production
// that started a loop: empty answers, misses, a storm of writes, the sync
// buffer overflowed and the resync failed again. The naive mode reads
// replicas here as such deployments do (ReaderConfig.ReadReplicas), with
// nothing that checks a replica has its data, through a client that routes
// by CLUSTER NODES read when it starts, as Lettuce does by default
// (ReaderConfig.RouteByClusterNodes): the restarted replica keeps its share
// of the reads for its whole resync. (rueidis's cluster client routes by
// CLUSTER SLOTS, re-reads it after the kill closes its connection, and
// Redis 7 leaves a replica that has replicated nothing out of it, so with
// rueidis the count hung on when that re-read came: between 0 and 26 reads
// across runs.) Figures: unready_replica_reads, the reads it answered before
// it was ready — from the client's per-node counters in the holdfast mode
// (ready = the tier's readiness), cross-checked with the new process's own
// INFO commandstats (GET + MGET calls); in the naive mode, which has no
// per-node counters, from INFO alone (ready = synced by its own INFO). And
// what those reads cost: the misses and loader calls from the restart until
// the replica was ready (misses_during_resync, loads_during_resync) beside
// the same counts over a window of the same length just before the restart
// (*_before_resync), when every key was in Redis.
func replicaResync(o Options) Plan {
	d := o.length(baseDuration)
	ks := keyScale(o)
	keys := max(300, int(clusterKeys*ks))
	fill := max(2000, int(200000*ks))
	w := middleHalf(d)
	p := clusterParams(d, w, keys)
	p["fill_keys"] = fill
	p["fill_value_bytes"] = 100
	p["fault"] = "SIGKILL one replica at fault_start_s and restart it at once, empty (no persistence), on the same port and node id: full resync"
	p["ready"] = "holdfast: the tier's readiness (NodeStats State); naive: the replica's INFO (master_link_status:up, master_sync_in_progress:0, loading:0)"
	p["naive_redis_client"] = "a rueidis client per node, routed by CLUSTER NODES read once when the client starts (as Lettuce, Spring's default Redis client, with its default of no topology refresh); a GET goes to a node picked at random among the slot's primary and replicas (Lettuce ReadFrom ANY, go-redis RouteRandomly), SET and DEL to the primary; no replica readiness check, no client-side cache, no retries, no node health"
	p["resync_window"] = "from the replica's kill until it was ready (as in ready); *_before_resync: a window of the same length just before the kill (from the run's start if shorter, before_resync_window_ms)"
	p["misses"] = "naive: GETs answered empty (misses) and failed GETs (redis_get_errors), each followed by a load and a SET; holdfast: hf_shared_misses and hf_shared_errors"
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		r := &resyncRun{d: d, restartAt: w[0], clientReads: -1, readyAfter: -1, syncedAfter: -1}
		t := clusterTraffic(d, keys)
		t.Window = w
		t.Reader.ReadReplicas = true
		t.Reader.RouteByClusterNodes = true
		t.Setup = func(f *Fixture) error { return r.setup(f, keys, fill) }
		t.Faults = []Fault{
			{At: 0, Name: "count before restart", Do: r.countBefore},
			{At: w[0], Name: "restart replica", Do: r.restart},
		}
		t.Extra = r.extra
		return t.RunMode(ctx, o, m)
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: run,
		Figure: "unready_replica_reads = 0 for holdfast, cross-checked by unready_replica_server_reads; naive > 0, each read a miss and a load (misses_during_resync, loads_during_resync) where the same length before the restart had none"}
}

// resyncRun is one mode's run of replica-resync.
type resyncRun struct {
	d       time.Duration
	replica *redistest.Process
	primary string

	restartAt time.Duration // offset of the kill

	// Set on the fault goroutine, read by extra after it ended.
	restarted      bool
	before         []resyncCount // every 20 ms from the run's start to the kill
	atKill, atEnd  resyncCount   // at the kill, and when the replica was ready (or the run ended)
	clientReads    int64         // -1 without per-node counters
	serverReads    int64
	samples        int
	readyAfter     time.Duration // -1: not ready by the end of the run
	syncedAfter    time.Duration // -1: not synced by the end of the run
	clientReadsPre uint64
}

func (r *resyncRun) setup(f *Fixture, keys, fill int) error {
	for _, n := range f.Cluster.Nodes {
		if role, err := Role(n.Addr()); err == nil && role == "replica" {
			r.replica = n
			break
		}
	}
	if r.replica == nil {
		return errors.New("no replica in the cluster")
	}
	port, err := InfoField(r.replica.Addr(), "replication", "master_port")
	if err != nil {
		return err
	}
	r.primary = "127.0.0.1:" + port
	if err := fillShard(f.Cluster, r.primary, fill); err != nil {
		return err
	}
	if err := warm(f, productKeys(keys), baseLoader); err != nil {
		return err
	}
	if err := f.Cluster.WaitHealthy(context.Background(), 30*time.Second); err != nil {
		return err
	}
	waitNodesReady(f, 15*time.Second)
	if n, ok := f.Reader.(*Naive); ok {
		if err := waitReplicasListed(f.Cluster, 15*time.Second); err != nil {
			return err
		}
		if err := n.redial(); err != nil {
			return err
		}
	}
	time.Sleep(redis.DefaultPrimaryAfterWrite + 100*time.Millisecond)
	return nil
}

// waitReplicasListed waits, at most limit, until every node lists every
// replica in CLUSTER SLOTS (Redis lists a replica there only once it has
// replicated something).
func waitReplicasListed(c *Cluster, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		missing := ""
		for _, n := range c.Nodes {
			slots, err := Command(n.Addr(), time.Second, "CLUSTER", "SLOTS")
			if err != nil {
				return fmt.Errorf("CLUSTER SLOTS: %w", err)
			}
			listed := map[string]bool{}
			for _, l := range strings.Split(slots, "\n") {
				listed[strings.TrimSpace(l)] = true
			}
			for _, r := range c.Nodes {
				_, port, _ := strings.Cut(r.Addr(), ":")
				if !listed[port] && missing == "" {
					missing = r.Addr() + " in " + n.Addr() + "'s CLUSTER SLOTS"
				}
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listed within %v: %s", limit, missing)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fillShard writes n keys of 100 bytes to the slots of primary, through a
// plain cluster client, pipelined.
func fillShard(c *Cluster, primary string, n int) error {
	owner, err := slotOwners(primary)
	if err != nil {
		return err
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	val := strings.Repeat("x", 100)
	cmds := make(rueidis.Commands, 0, 1000)
	flush := func() error {
		for _, res := range cl.DoMulti(ctx, cmds...) {
			if err := res.Error(); err != nil {
				return fmt.Errorf("fill: %w", err)
			}
		}
		cmds = cmds[:0]
		return nil
	}
	// About a third of the names fall on primary's slots: a bounded scan.
	for i, put := 0, 0; put < n && i < 10*n; i++ {
		k := "fill:" + strconv.Itoa(i)
		if owner[redis.Slot(k)] != primary {
			continue
		}
		put++
		cmds = append(cmds, cl.B().Set().Key(k).Value(val).ExSeconds(3600).Build())
		if len(cmds) == cap(cmds) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// resyncCount is the reader's misses and the source's loads at a time.
type resyncCount struct {
	at             time.Time
	misses, errors float64
	loads          int64
}

func countNow(f *Fixture) resyncCount {
	st := f.Reader.Stats()
	loads, _ := f.Source.Calls()
	c := resyncCount{at: time.Now(), loads: loads}
	if _, ok := st["misses"]; ok { // naive
		c.misses, c.errors = st["misses"], st["redis_get_errors"]
	} else {
		c.misses, c.errors = st["hf_shared_misses"], st["hf_shared_errors"]
	}
	return c
}

// countBefore samples the counts every 20 ms until the kill, so that extra
// can take a window before it as long as the resync turns out to be.
func (r *resyncRun) countBefore(ctx context.Context, f *Fixture) error {
	kill := f.Start.Add(r.restartAt)
	for {
		r.before = append(r.before, countNow(f))
		wait := min(20*time.Millisecond, time.Until(kill))
		if wait <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// restart kills the replica, then starts it again empty, and samples until
// it is ready (or the run ends): the client's reads counted for it and its
// own GET/MGET calls, at the last sample taken while it was not ready.
func (r *resyncRun) restart(ctx context.Context, f *Fixture) error {
	// The resync is timed with a production server's settings: the
	// primary waits its default 5 s for more replicas before it sends
	// (StartCluster starts at once, to start quickly).
	for _, n := range f.Cluster.Nodes {
		if _, err := Command(n.Addr(), time.Second, "CONFIG", "SET", "repl-diskless-sync-delay", "5"); err != nil {
			return fmt.Errorf("%s: CONFIG SET repl-diskless-sync-delay: %w", n.Addr(), err)
		}
	}
	r.atKill = countNow(f)
	r.replica.Kill()
	defer func() { r.atEnd = countNow(f) }()
	// Read after the kill: no answer from the old process can come later.
	pre, counted := nodeStat(f.Reader, r.replica.Addr())
	if counted {
		r.clientReadsPre = pre.Reads
		r.clientReads = 0
	}
	at := time.Now()
	if err := r.replica.Restart(); err != nil {
		return err
	}
	r.restarted = true
	end := f.Start.Add(r.d - 100*time.Millisecond)
	for time.Now().Before(end) {
		s1, _ := nodeStat(f.Reader, r.replica.Addr())
		info, err := infoAll(r.replica.Addr())
		s2, _ := nodeStat(f.Reader, r.replica.Addr())
		synced := err == nil && info["master_link_status"] == "up" &&
			info["master_sync_in_progress"] == "0" && info["loading"] == "0"
		if synced && r.syncedAfter < 0 {
			r.syncedAfter = time.Since(at)
		}
		if counted && (s2.State == redis.NodeReady || s2.Readies > pre.Readies) {
			r.readyAfter = time.Since(at)
			return nil
		}
		if !counted && synced {
			r.readyAfter = r.syncedAfter
			return nil
		}
		if err == nil {
			r.samples++
			r.serverReads = readCalls(info)
			if counted && s1.State != redis.NodeReady {
				r.clientReads = int64(s1.Reads - r.clientReadsPre)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (r *resyncRun) extra(f *Fixture, res *ModeResult) {
	if !r.restarted {
		return
	}
	if r.clientReads >= 0 {
		res.Extra["unready_replica_reads"] = float64(r.clientReads)
	} else {
		res.Extra["unready_replica_reads"] = float64(r.serverReads)
	}
	res.Extra["unready_replica_server_reads"] = float64(r.serverReads)
	res.Extra["unready_samples"] = float64(r.samples)
	// Left out when it did not happen before the end of the run.
	if r.readyAfter >= 0 {
		res.Extra["replica_ready_after_ms"] = ms(r.readyAfter)
	}
	if r.syncedAfter >= 0 {
		res.Extra["replica_synced_after_ms"] = ms(r.syncedAfter)
	}
	if info, err := infoAll(r.replica.Addr()); err == nil {
		res.Extra["replica_reads_after_restart"] = float64(readCalls(info))
	}
	if s, ok := nodeStat(f.Reader, r.replica.Addr()); ok {
		res.Extra["replica_client_reads_after_restart"] = float64(s.Reads - r.clientReadsPre)
	}
	if len(r.before) == 0 || r.atEnd.at.IsZero() {
		return
	}
	// The same length before the kill: the first sample at or after
	// kill - length (the run's first one if the run began later).
	length := r.atEnd.at.Sub(r.atKill.at)
	from := r.before[0]
	for _, c := range r.before {
		if !c.at.Before(r.atKill.at.Add(-length)) {
			from = c
			break
		}
	}
	res.Extra["resync_window_ms"] = ms(length)
	res.Extra["before_resync_window_ms"] = ms(r.atKill.at.Sub(from.at))
	res.Extra["misses_during_resync"] = r.atEnd.misses - r.atKill.misses
	res.Extra["misses_before_resync"] = r.atKill.misses - from.misses
	res.Extra["get_errors_during_resync"] = r.atEnd.errors - r.atKill.errors
	res.Extra["get_errors_before_resync"] = r.atKill.errors - from.errors
	res.Extra["loads_during_resync"] = float64(r.atEnd.loads - r.atKill.loads)
	res.Extra["loads_before_resync"] = float64(r.atKill.loads - from.loads)
}

// infoAll returns every field of the server's INFO ALL.
func infoAll(addr string) (map[string]string, error) {
	s, err := Command(addr, 500*time.Millisecond, "INFO", "all")
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// parseInfo returns the "field:value" lines of an INFO reply as a map.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// readCalls is GET + MGET calls from INFO commandstats fields
// ("calls=N,usec=...").
func readCalls(info map[string]string) int64 {
	var n int64
	for _, c := range []string{"cmdstat_get", "cmdstat_mget"} {
		f, _, _ := strings.Cut(strings.TrimPrefix(info[c], "calls="), ",")
		x, _ := strconv.ParseInt(f, 10, 64)
		n += x
	}
	return n
}

// slotOwners maps every hash slot to its primary's address, from CLUSTER
// NODES as addr sees it.
func slotOwners(addr string) (owner [16384]string, _ error) {
	r, err := clusterNodesAt(addr)
	if err != nil {
		return owner, err
	}
	for i, sh := range r.slot {
		if sh >= 0 {
			owner[i] = r.addrs[r.shards[sh][0]]
		}
	}
	return owner, nil
}
