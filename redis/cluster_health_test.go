package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// Real-process tests of per-node health on a 3 primaries + 3 replicas
// Cluster. The default run is scaled down to stay well under a minute in all;
// HOLDFAST_FULL=1 runs the full target sizes (10 s phases, 200,000 keys).

func fullRun() bool { return os.Getenv("HOLDFAST_FULL") == "1" }

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
}

// nodeStat returns addr's entry in tr.NodeStats, or a zero NodeStats with
// State NodeNotReady and Addr "" when the node is not in the map.
func nodeStat(tr *Tier, addr string) NodeStats {
	for _, s := range tr.NodeStats() {
		if s.Addr == addr {
			return s
		}
	}
	return NodeStats{State: NodeNotReady}
}

// waitReady waits until tr's map holds want nodes, all ready. Call it
// after some writes: CLUSTER SLOTS leaves out a replica whose replication
// offset, as gossiped, is still 0, which on a fresh cluster without writes
// lasts until the first replication PING (10 s).
func waitReady(t *testing.T, tr *Tier, want int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st := tr.NodeStats()
		ready := 0
		for _, s := range st {
			if s.State == NodeReady {
				ready++
			}
		}
		if len(st) == want && ready == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes not all ready within %v: %+v", d, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// primaryOf returns the address of the primary serving key (a full key) in
// tr's map.
func primaryOf(tr *Tier, full string) string {
	return tr.nodes.primaryFor(slot(full)).addr
}

func serverByAddr(cl *redistest.RedisCluster, addr string) *redistest.Server {
	for _, n := range cl.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// infoInt reads one integer field of INFO section from srv.
func infoInt(t *testing.T, srv *redistest.Server, section, field string) int64 {
	t.Helper()
	info, err := srv.Info(ctxT(t, 5*time.Second), section)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseInt(info[field], 10, 64)
	return v
}

// serverReads is how many GET and MGET commands srv has run.
func serverReads(t *testing.T, srv *redistest.Server) int {
	return commandCalls(t, srv, "get") + commandCalls(t, srv, "mget")
}

func p99(ds []time.Duration) time.Duration { return quantile(ds, 0.99) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// TestClusterUniformReads: with uniform keys, reads spread over the six
// nodes (3 primaries + their ready replicas) within max/mean 1.2, every read
// a hit, and the client's per-node counts equal the servers' own GET counts.
func TestClusterUniformReads(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 60*time.Second)
	goroutines := runtime.NumGoroutine()
	// The 3,000 writes that set the test up are one batch: a second, not
	// the default 100 ms, so that a busy machine does not fail the setup.
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "u:", ReadBudget: 200 * time.Millisecond,
		WriteTimeout: 2 * time.Second, Cluster: ClusterOptions{PrimaryAfterWrite: -1}})

	const keys = 3000
	items := make([]tier.Item, keys)
	for i := range items {
		items[i] = tier.Item{Key: fmt.Sprintf("ns:%d", i), Value: []byte("v"), TTL: 10 * time.Minute}
	}
	if err := tr.Set(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil { // replicas caught up
		t.Fatal(err)
	}
	waitReady(t, tr, 6, 10*time.Second)
	before := map[string]int{}
	for _, n := range cl.Nodes() {
		before[n.Addr()] = serverReads(t, n)
	}
	base := map[string]uint64{}
	for _, s := range tr.NodeStats() {
		base[s.Addr] = s.Reads
	}

	reads := 30000
	if fullRun() {
		reads = 300000
	}
	var wg sync.WaitGroup
	var misses, errs atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < reads/8; i++ {
				_, found, err := tr.Get(ctx, fmt.Sprintf("ns:%d", rand.IntN(keys)))
				switch {
				case err != nil:
					errs.Add(1)
				case !found:
					misses.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 || misses.Load() != 0 {
		t.Fatalf("%d errors, %d misses", errs.Load(), misses.Load())
	}
	var counts []float64
	var report []string
	for _, s := range tr.NodeStats() {
		got := s.Reads - base[s.Addr]
		counts = append(counts, float64(got))
		srvGot := serverReads(t, serverByAddr(cl, s.Addr)) - before[s.Addr]
		report = append(report, fmt.Sprintf("%s primary=%v reads=%d (server %d)", s.Addr, s.Primary, got, srvGot))
		if uint64(srvGot) != got {
			t.Errorf("node %s: client counted %d reads, server ran %d GETs", s.Addr, got, srvGot)
		}
	}
	var sum, hi float64
	for _, c := range counts {
		sum += c
		hi = max(hi, c)
	}
	ratio := hi / (sum / float64(len(counts)))
	t.Logf("%d reads over %d nodes, max/mean %.3f:\n  %s", reads, len(counts), ratio, strings.Join(report, "\n  "))
	if len(counts) != 6 || ratio > 1.2 {
		t.Fatalf("max/mean = %.3f over %d nodes, want <= 1.2", ratio, len(counts))
	}

	// Idle, a shard is not polled: a fleet of processes that read nothing
	// sends no INFO. The replicas' proof runs out, and the reads after it
	// go to the primaries until the round they ask for proves the
	// replicas again.
	idle := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "u:", ReadBudget: 200 * time.Millisecond,
		Cluster: ClusterOptions{PrimaryAfterWrite: -1, ReadinessInterval: 100 * time.Millisecond}})
	waitReady(t, idle, 6, 10*time.Second)
	total := func(f func(n *node) uint64) (v uint64) {
		for _, n := range idle.nodes.topo.Load().nodes {
			v += f(n)
		}
		return v
	}
	polls := func(n *node) uint64 { return n.polls.Load() + n.pollErrs.Load() }
	replicaReads := func(n *node) uint64 {
		if n.primary.Load() {
			return 0
		}
		return n.reads.load()
	}
	time.Sleep(700 * time.Millisecond) // rounds asked for by waitReady's NodeStats end (a poll takes at most 500 ms)
	p0 := total(polls)
	time.Sleep(600 * time.Millisecond) // six intervals, past the proof's 100 ms + 500 ms
	if got := total(polls) - p0; got != 0 {
		t.Fatalf("%d polls while nothing read", got)
	}
	r0 := total(replicaReads)
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; total(replicaReads) == r0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no replica read within 5 s of reading again (%d polls since)", total(polls)-p0)
		}
		if _, _, err := idle.Get(ctx, fmt.Sprintf("ns:%d", i%keys)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	_ = idle.Close()

	// Disabled: rueidis's own routing, no per-node state, same answers.
	plain := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "u:", Cluster: ClusterOptions{Disabled: true}})
	if v, found, err := plain.Get(ctx, "ns:7"); err != nil || !found || string(v) != "v" || plain.NodeStats() != nil {
		t.Fatalf("Disabled: %q %v %v, %v", v, found, err, plain.NodeStats())
	}
	_ = plain.Close()

	// Close stops the background loop, the polls and every node client.
	_ = tr.Close()
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before New:\n%s", runtime.NumGoroutine(), goroutines, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readSample is one read of a load run.
type readSample struct {
	at      time.Duration // since the run began
	lat     time.Duration
	healthy bool // the key's primary is not the node the test breaks
	err     error
}

// load reads random keys through read at rate reads/s, spread over 6
// goroutines, until stop is closed.
func load(rate int, keys int, read func(i int) error, healthy func(i int) bool, stop <-chan struct{}) []readSample {
	const workers = 6
	var mu sync.Mutex
	var out []readSample
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(time.Second * workers / time.Duration(rate))
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				i := rand.IntN(keys)
				t0 := time.Now()
				err := read(i)
				s := readSample{at: t0.Sub(start), lat: time.Since(t0), healthy: healthy(i), err: err}
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// warmUp reads keys k0..k<n-1> through ns once, 16 at a time, so that each
// is loaded, written to Redis and kept as last-known-good.
func warmUp(t *testing.T, ctx context.Context, ns *holdfast.Namespace, loader holdfast.Loader, n int) {
	t.Helper()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 16 {
				if _, err := ns.Get(ctx, "k"+strconv.Itoa(i), loader); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d warm-up reads failed", failed.Load())
	}
}

// cacheOver builds a Cache over tr with one namespace that keeps
// last-known-good values for a minute past their TTL, and a loader that
// fails once dbDown is set (the database is unavailable: every answer must
// come from Redis or from last-known-good).
func cacheOver(t *testing.T, tr *Tier) (*holdfast.Namespace, holdfast.Loader, *atomic.Bool) {
	t.Helper()
	c, err := holdfast.New(holdfast.Options{Shared: tr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ns, err := c.Namespace("nf", holdfast.Policy{TTL: 5 * time.Minute, StaleIfError: 5 * time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	var dbDown atomic.Bool
	loader := func(ctx context.Context, key string) ([]byte, error) {
		if dbDown.Load() {
			return nil, errors.New("database unavailable")
		}
		return []byte("v" + key), nil
	}
	return ns, loader, &dbDown
}

// In a Cluster a read that times out on a silent shard, with no other call
// made meanwhile, opens no breaker for the whole tier: on a quiet tier the
// other nodes may simply have had no calls (a standalone server's silence
// opens it at once, TestFrozenServerOpensBreakerAtOnce), and per-node
// ejection deals with the silent nodes.
func TestClusterLoneTimeoutKeepsBreakerClosed(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 15 * time.Second})
	tr := newTier(t, Options{Addrs: cl.Addrs()})
	waitReady(t, tr, 6, 30*time.Second) // a fresh Cluster lists its replicas late on a busy machine
	ctx := context.Background()
	silent := primaryOf(tr, "q:k0")
	var other string
	for i := 1; other == ""; i++ {
		if k := "q:k" + strconv.Itoa(i); primaryOf(tr, k) != silent {
			other = k
		}
	}
	for _, k := range []string{"q:k0", other} {
		if _, _, err := tr.Get(ctx, k); err != nil {
			t.Fatalf("healthy read of %s: %v", k, err)
		}
	}
	// The shard's primary and its replica, so that the read meets silence
	// wherever it goes.
	for _, n := range tr.NodeStats() {
		if n.Addr == silent || n.Of == silent {
			srv := serverByAddr(cl, n.Addr)
			srv.Freeze()
			t.Cleanup(srv.Thaw)
		}
	}
	if _, _, err := tr.Get(ctx, "q:k0"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read of the silent shard: %v, want a timeout", err)
	}
	if st := tr.Stats(); st.BreakerOpens != 0 || st.Timeouts != 1 {
		t.Fatalf("stats %+v: want one timeout and the tier's breaker closed", st)
	}
	if _, _, err := tr.Get(ctx, other); err != nil {
		t.Fatalf("read of another shard after the timeout: %v", err)
	}
}

// TestClusterPrimaryFrozen: one primary SIGSTOPped under 300 reads/s over
// 3,000 keys through holdfast.Cache. It is ejected within 1 s of the
// freeze; reads of keys on the healthy nodes keep their p99 (ratio to the
// same run's baseline); the Cache answers every read (0 errors) with the
// database down, from Redis, the frozen primary's replica or last-known-good;
// the tier's breaker never opens; after Thaw a probe brings it back.
func TestClusterPrimaryFrozen(t *testing.T) {
	skipShort(t)
	// A grey node, not a failover: the cluster's own failure detection
	// stays out of the way for the whole freeze.
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 15 * time.Second})
	ctx := ctxT(t, 120*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()})
	ns, loader, dbDown := cacheOver(t, tr)
	const keys = 3000
	warmUp(t, ctx, ns, loader, keys)
	waitReady(t, tr, 6, 10*time.Second)
	frozen := serverByAddr(cl, primaryOf(tr, "nf:k0"))
	onHealthy := make([]bool, keys)
	for i := range onHealthy {
		onHealthy[i] = primaryOf(tr, "nf:k"+strconv.Itoa(i)) != frozen.Addr()
	}
	healthy := func(i int) bool { return onHealthy[i] }
	time.Sleep(DefaultPrimaryAfterWrite + 100*time.Millisecond) // reads spread to replicas again
	dbDown.Store(true)

	phase := 3 * time.Second
	if fullRun() {
		phase = 10 * time.Second
	}
	stop := make(chan struct{})
	done := make(chan []readSample)
	loadStart := time.Now()
	go func() {
		done <- load(300, keys, func(i int) error {
			_, err := ns.Get(ctx, "k"+strconv.Itoa(i), loader)
			return err
		}, healthy, stop)
	}()
	time.Sleep(phase)
	freezeAt := time.Now()
	frozen.Freeze()
	time.Sleep(phase)
	close(stop)
	samples := <-done
	fst := nodeStat(tr, frozen.Addr())
	frozen.Thaw()

	var baseHealthy, frozenHealthy, frozenAll []time.Duration
	errs := 0
	split := freezeAt.Sub(loadStart)
	for _, s := range samples {
		if s.err != nil {
			errs++
			if errs < 5 {
				t.Errorf("read error: %v", s.err)
			}
		}
		switch {
		case s.at < split && s.healthy:
			baseHealthy = append(baseHealthy, s.lat)
		case s.at >= split:
			frozenAll = append(frozenAll, s.lat)
			if s.healthy {
				frozenHealthy = append(frozenHealthy, s.lat)
			}
		}
	}
	ejectAfter := fst.LastEjected.Sub(freezeAt)
	bp, fp := p99(baseHealthy), p99(frozenHealthy)
	ratio := float64(fp) / float64(bp)
	t.Logf("frozen %s: %d reads (%d during the freeze), %d errors; first ejection %v after the freeze; "+
		"healthy-key p99 %v baseline, %v frozen (ratio %.2f); all reads during the freeze p50 %v p99 %v max %v; node %+v; tier %+v",
		frozen.Addr(), len(samples), len(frozenAll), errs, ejectAfter, bp, fp, ratio,
		quantile(frozenAll, 0.5), p99(frozenAll), quantile(frozenAll, 1), fst, tr.Stats())
	if errs != 0 {
		t.Fatalf("%d of %d reads failed", errs, len(samples))
	}
	if fst.Ejections == 0 || ejectAfter > time.Second || ejectAfter < 0 {
		t.Fatalf("first ejection %v after the freeze (ejections %d), want <= 1 s", ejectAfter, fst.Ejections)
	}
	// What this guards against is healthy keys waiting on the frozen
	// node, which costs them the read budget (50 ms). Wide margins for a
	// shared CI box and the race detector: 3×, or within half the budget
	// of the baseline (the p99s of a few hundred reads each, taken seconds
	// apart, differed by 13 ms with nothing wrong on a busy machine).
	if ratio > 3 && fp-bp > DefaultReadBudget/2 {
		t.Fatalf("healthy-key p99 %v during the freeze vs %v baseline", fp, bp)
	}
	if p := p99(frozenAll); p > DefaultReadBudget+margin {
		t.Fatalf("p99 of all reads during the freeze %v", p)
	}
	if st := tr.Stats(); st.BreakerOpens != 0 {
		t.Fatalf("one frozen node opened the whole tier's breaker: %+v", st)
	}
	if fst.WatchdogCloses == 0 {
		t.Fatalf("the frozen node's silent connection was never closed: %+v", fst)
	}

	// Thawed: a probe brings it back within MaxProbeInterval plus a probe
	// (the documented bound; a wide margin for a busy machine), and it
	// takes reads again.
	thawAt := time.Now()
	bound := DefaultMaxProbeInterval + DefaultProbeTimeout
	deadline := thawAt.Add(bound + 2*time.Second)
	for nodeStat(tr, frozen.Addr()).State != NodeReady {
		if time.Now().After(deadline) {
			t.Fatalf("thawed node not back %v after the thaw (bound %v): %+v", time.Since(thawAt), bound, nodeStat(tr, frozen.Addr()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("back %v after the thaw (bound %v)", time.Since(thawAt), bound)
	before := nodeStat(tr, frozen.Addr()).Reads
	for i := 0; i < 200; i++ {
		if _, _, err := tr.Get(ctx, "nf:k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if nodeStat(tr, frozen.Addr()).Reads == before {
		t.Fatal("node back but takes no reads")
	}
}

// TestClusterReplicaRestartedEmpty: a replica restarted with no data while
// its primary holds many keys (20,000; 200,000 with HOLDFAST_FULL=1) takes
// no read until it is ready again: readers of that shard see 0 misses, the
// client's counters show no read answered by it while not ready, and the
// new server process itself reports 0 GET/MGET calls and 0 keyspace
// lookups at every sample taken before the tier called it ready.
func TestClusterReplicaRestartedEmpty(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 120*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs(), Cluster: ClusterOptions{PrimaryAfterWrite: -1}})
	raw := rawClient(t, cl.Addrs()...)
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}", "{e}", "{f}"} { // writes to every shard
		if err := raw.Do(ctx, raw.B().Set().Key(k).Value("x").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, tr, 6, 10*time.Second)

	var replica NodeStats
	for _, s := range tr.NodeStats() {
		if !s.Primary {
			replica = s
			break
		}
	}
	rsrv, psrv := serverByAddr(cl, replica.Addr), serverByAddr(cl, replica.Of)

	n := 20000
	if fullRun() {
		n = 200000
	}
	val := strings.Repeat("x", 100)
	var shardKeys []string
	for lo := 0; lo < n; lo += 1000 {
		cmds := make(rueidis.Commands, 0, 1000)
		for i := lo; i < min(n, lo+1000); i++ {
			k := "ns:" + strconv.Itoa(i)
			cmds = append(cmds, raw.B().Set().Key(k).Value(val).ExSeconds(600).Build())
			if primaryOf(tr, k) == psrv.Addr() {
				shardKeys = append(shardKeys, k)
			}
		}
		for _, r := range raw.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// Make the resync take a while, whatever the data size: the primary
	// waits 2 s before it streams the snapshot.
	if _, err := psrv.CLI(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "2"); err != nil {
		t.Fatal(err)
	}

	var paused atomic.Bool
	var misses, errs, hits atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if paused.Load() {
					time.Sleep(time.Millisecond)
					continue
				}
				_, found, err := tr.Get(ctx, shardKeys[rand.IntN(len(shardKeys))])
				switch {
				case err != nil:
					if errs.Add(1) <= 3 {
						t.Logf("read error: %v", err)
					}
				case !found:
					misses.Add(1)
				default:
					hits.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	if nodeStat(tr, replica.Addr).Reads == 0 {
		t.Fatal("the replica took no reads before the restart")
	}

	paused.Store(true)
	time.Sleep(100 * time.Millisecond) // reads in flight land
	beforeRestart := nodeStat(tr, replica.Addr)
	restartAt := time.Now()
	rsrv.Restart()
	paused.Store(false)

	notReadySamples := 0
	var readyAfter time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for {
		s1 := nodeStat(tr, replica.Addr)
		info, err := rsrv.Info(ctx, "all")
		s2 := nodeStat(tr, replica.Addr)
		if s2.Readies > beforeRestart.Readies || s2.State == NodeReady {
			readyAfter = time.Since(restartAt)
			break
		}
		if err == nil && s1.State != NodeReady {
			notReadySamples++
			calls := 0
			for _, c := range []string{"cmdstat_get", "cmdstat_mget"} {
				if v, ok := info[c]; ok {
					f, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
					x, _ := strconv.Atoi(f)
					calls += x
				}
			}
			lookups := info["keyspace_hits"] + "/" + info["keyspace_misses"]
			if calls != 0 || lookups != "0/0" {
				t.Fatalf("restarted replica served reads before ready: %d GET/MGET, hits/misses %s (tier: %+v)", calls, lookups, s2)
			}
			// The tier may have made the restarted node anew (a topology
			// refresh that saw it leave and come back), its counters from
			// zero: then every read it counts came since.
			answered := s2.Reads - beforeRestart.Reads
			if s2.Reads < beforeRestart.Reads {
				answered = s2.Reads
			}
			if answered != 0 {
				t.Fatalf("client counted %d reads answered by the replica while not ready", answered)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not ready within 60 s: %+v", s2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	after := nodeStat(tr, replica.Addr)
	size := infoInt(t, rsrv, "keyspace", "db0")
	dbsize, _ := rsrv.CLI(ctx, "DBSIZE")
	t.Logf("%d keys, %d on the shard; replica %s ready again %v after its restart; %d samples while not ready with 0 server reads; "+
		"readers: %d hits, %d misses, %d errors; replica reads %d -> %d; DBSIZE %s (%d)",
		n, len(shardKeys), replica.Addr, readyAfter, notReadySamples, hits.Load(), misses.Load(), errs.Load(),
		beforeRestart.Reads, after.Reads, dbsize, size)
	if notReadySamples == 0 {
		t.Fatal("never saw the replica not ready: the test proves nothing")
	}
	if misses.Load() != 0 {
		t.Fatalf("%d misses: an empty replica answered", misses.Load())
	}
	// A read in flight on the connection the restart broke may fail (the
	// Cache serves last-known-good for it); more than that means reads
	// kept going to a node that was down.
	if e, all := errs.Load(), hits.Load()+errs.Load(); e*100 > all {
		t.Fatalf("%d of %d reads failed around the restart", e, all)
	}
	if after.Reads == beforeRestart.Reads || serverReads(t, rsrv) == 0 {
		t.Fatal("the replica takes no reads once ready")
	}
	if _, err := psrv.CLI(ctx, "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatal(err)
	}
}

// TestClusterPrimaryKilled: a primary SIGKILLed with cluster-node-timeout
// 1 s under 300 reads/s through holdfast.Cache with the database down:
// 0 errors through the failover (its replica is not ready once its link is
// down, so those reads are bypassed to last-known-good at once); the
// promoted replica shows up as a primary in the tier's map without a
// restart and serves reads and writes of the slots, writes from the moment
// it shows up.
func TestClusterPrimaryKilled(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: time.Second})
	ctx := ctxT(t, 120*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()})
	ns, loader, dbDown := cacheOver(t, tr)
	const keys = 3000
	warmUp(t, ctx, ns, loader, keys)
	waitReady(t, tr, 6, 10*time.Second)
	victim := primaryOf(tr, "nf:k0")
	var heir string
	for _, s := range tr.NodeStats() {
		if s.Of == victim {
			heir = s.Addr
		}
	}
	onShard := make([]bool, keys) // the key's slot is the killed primary's
	for i := range onShard {
		onShard[i] = primaryOf(tr, "nf:k"+strconv.Itoa(i)) == victim
	}
	dbDown.Store(true)

	stop := make(chan struct{})
	done := make(chan []readSample)
	go func() {
		done <- load(300, keys, func(i int) error {
			_, err := ns.Get(ctx, "k"+strconv.Itoa(i), loader)
			return err
		}, func(i int) bool { return !onShard[i] }, stop)
	}()
	time.Sleep(time.Second)
	killAt := time.Now()
	serverByAddr(cl, victim).Kill()

	var promoted, seen time.Duration
	deadline := time.Now().Add(30 * time.Second)
	for seen == 0 {
		if promoted == 0 {
			if info, err := serverByAddr(cl, heir).Info(ctx, "replication"); err == nil && info["role"] == "master" {
				promoted = time.Since(killAt)
			}
		}
		if s := nodeStat(tr, heir); s.Primary && s.State == NodeReady {
			seen = time.Since(killAt)
		}
		if time.Now().After(deadline) {
			t.Fatalf("failover not seen within 30 s: heir %+v", nodeStat(tr, heir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A write as soon as the tier's map names the promoted replica goes
	// there: writes follow the map reads follow, not rueidis's own, which
	// refreshes on its own errors and timer.
	if err := tr.Set(ctx, tier.Item{Key: "nf:k0", Value: []byte("at-once"), TTL: time.Minute}); err != nil {
		t.Fatalf("write as the map changed: %v", err)
	}
	time.Sleep(time.Second)
	close(stop)
	samples := <-done
	errs := 0
	for _, s := range samples {
		if s.err != nil {
			errs++
			if errs < 5 {
				t.Errorf("read error: %v", s.err)
			}
		}
	}
	nsStats := ns.Stats()
	t.Logf("killed %s: replica %s promoted %v after the kill, in the tier's map %v after; %d reads, %d errors; "+
		"namespace %+v; tier %+v; nodes %+v", victim, heir, promoted, seen, len(samples), errs, nsStats, tr.Stats(), tr.NodeStats())
	if errs != 0 {
		t.Fatalf("%d of %d reads failed during the failover", errs, len(samples))
	}
	if got := nodeStat(tr, victim); got.State == NodeReady || got.Primary {
		t.Errorf("killed node still serving in the map: %+v", got)
	}

	// The new topology is used: reads of the slot go to the promoted node
	// and succeed; a write lands on it.
	before := nodeStat(tr, heir).Reads
	for i := 0; i < 100; i++ {
		if v, found, err := tr.Get(ctx, "nf:k0"); err != nil || !found || len(v) == 0 {
			t.Fatalf("after failover: %q, %v, %v", v, found, err)
		}
	}
	if nodeStat(tr, heir).Reads < before+100 {
		t.Fatalf("reads of the failed-over slot not served by the promoted node: %+v", nodeStat(tr, heir))
	}
	if err := tr.Set(ctx, tier.Item{Key: "nf:k0", Value: []byte("new"), TTL: time.Minute}); err != nil {
		t.Fatalf("write after failover: %v", err)
	}
	if v, _ := serverByAddr(cl, heir).CLI(ctx, "GET", "nf:k0"); v != "new" {
		t.Fatalf("write not on the promoted node: %q", v)
	}
}

// TestClusterWatchdog: a read with a 5 s budget to a frozen primary fails
// after about SilentConnTimeout (1 s), not 5 s, because the watchdog closes
// the silent connection and rueidis fails its pending requests at once.
// Ejection is kept out of the way, and rueidis's own idle PING
// (PingTimeout) is set to 10 s, so the watchdog alone is measured.
func TestClusterWatchdog(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 60*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs(), ReadBudget: 5 * time.Second, PingTimeout: 10 * time.Second,
		Cluster: ClusterOptions{ConsecutiveFailures: 1000, MinRequests: 1000}})
	if err := tr.Set(ctx, tier.Item{Key: "ns:w", Value: []byte("v"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Just written: PrimaryAfterWrite sends the read to the primary.
	if _, found, err := tr.Get(ctx, "ns:w"); err != nil || !found {
		t.Fatalf("Get: %v %v", found, err)
	}
	p := serverByAddr(cl, primaryOf(tr, "ns:w"))
	p.Freeze()
	defer p.Thaw()
	start := time.Now()
	_, _, err := tr.Get(ctx, "ns:w")
	d := time.Since(start)
	st := nodeStat(tr, p.Addr())
	t.Logf("read to a frozen primary failed after %v: %v; node %+v", d, err, st)
	if err == nil || errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("Get to a frozen primary: %v", err)
	}
	if d < 900*time.Millisecond || d > DefaultSilentConnTimeout+300*time.Millisecond || st.WatchdogCloses == 0 {
		t.Fatalf("failed after %v with %d watchdog closes; want about 1 s, by the watchdog", d, st.WatchdogCloses)
	}
}
