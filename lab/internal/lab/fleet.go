package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// fleet-loss: a fleet-sized Cluster (30 primaries + 30 replicas) at peak
// traffic loses 12 of its 60 nodes at once, as when several hosts that each
// run several nodes fail together, for 30 s, and gets them back.
//
// Which nodes. The 60 nodes are laid out on 15 modelled hosts of 4 nodes
// (2 primaries and 2 replicas each), every shard's primary and replica on
// different hosts, as redis-cli --cluster create's anti-affinity and managed
// services place them: a host's loss then costs nodes, never a whole shard.
// The first 3 hosts that share no shard fail: 6 primaries and 6 replicas
// of 12 different shards. Each lost primary's replica is alive and takes
// over (failover after cluster-node-timeout, 5 s here); each lost
// replica's primary keeps serving its shard alone.
//
// Freeze, not kill. A failed host does not close its connections: packets
// to it go unanswered, and clients learn of the loss only from their
// timeouts. On loopback only SIGSTOP reproduces that (the kernel keeps
// accepting connections into the backlog, nothing is ever answered);
// SIGKILL gives an instant connection refused, the case any client handles
// in microseconds. The nodes come back with SIGCONT, as hosts back from a
// hang or a partition, each lost primary now a replica of the node that
// took over its shard (the return of a node restarted empty is
// replica-resync's subject).
//
// Figures (over the fault window): p50/p95/p99/max and errors; loader
// calls; first_ejection_ms and last_ejection_ms, from the freeze to the
// holdfast tier's first and last ejection of a lost node;
// return_to_service_ms_max, from the thaw to the last returned node's first
// read (its own GET/MGET count, INFO commandstats, rising past its first
// answer after the thaw, which absorbs the commands queued while it was
// frozen); node_reads_max_over_mean, the live nodes' GET/MGET calls over the
// window, max over mean, beside node_reads_max_over_mean_floor, what it is
// when every read reaches Redis, every shard is read alike and each spreads
// its reads evenly over its live nodes: a shard that lost a node has one left
// for all of its reads. Only answering some of a busy node's reads from
// memory goes below it. node_reads_max and
// node_reads_mean are the busiest live node's calls and the mean's: the bar
// compares holdfast's busiest node with naive's mean, the load an even
// spread of every read would put on a node. With the hot tier holding every
// key read, what reaches Redis is mostly misses, which have no copy in
// memory to answer from, so holdfast's own max over mean sits at the floor
// while its busiest node carries a fraction of naive's mean.
const (
	fleetShards      = 30
	fleetHosts       = 15
	fleetLostHosts   = 3
	fleetRate        = 3000.0
	fleetKeys        = 100000
	fleetDuration    = 45 * time.Second
	fleetNodeTimeout = 5 * time.Second
	fleetTTL         = 5 * time.Minute
)

// fleetLayout places shards primaries and shards replicas (Cluster.Nodes
// order: primary of shard s at s, its replica at shards+s) on hosts hosts,
// each holding shards/hosts primaries and as many replicas. Host h holds
// the primaries of shards k·h … k·h+k-1 and the replicas of the shards half
// the ring away, so a shard's two nodes are never on one host.
func fleetLayout(shards, hosts int) [][]int {
	k := shards / hosts
	out := make([][]int, hosts)
	for h := range hosts {
		for j := range k {
			out[h] = append(out[h], k*h+j)
		}
		for j := range k {
			out[h] = append(out[h], shards+(k*h+j+shards/2)%shards)
		}
	}
	return out
}

// lostHosts picks want hosts of layout, in order, skipping any that holds
// a node of a shard already hit, and returns their nodes, sorted: the hosts
// a real fleet can lose without losing a shard.
func lostHosts(layout [][]int, shards, want int) []int {
	hit := map[int]bool{}
	var nodes []int
	picked := 0
	for _, host := range layout {
		if picked == want {
			break
		}
		if slices.ContainsFunc(host, func(n int) bool { return hit[n%shards] }) {
			continue
		}
		for _, n := range host {
			hit[n%shards] = true
		}
		nodes = append(nodes, host...)
		picked++
	}
	slices.Sort(nodes)
	return nodes
}

// maxOverMean returns max(v) / mean(v); 0 for an empty or all-zero v.
func maxOverMean(v []float64) float64 {
	var sum, top float64
	for _, x := range v {
		sum += x
		top = max(top, x)
	}
	if len(v) == 0 || sum == 0 {
		return 0
	}
	return top / (sum / float64(len(v)))
}

// liveShareFloor is the lowest max/mean of reads over the live nodes that
// any client reaches with lost nodes down when every shard is read alike:
// each shard's reads spread evenly over its live nodes (2 per shard, less
// those of its nodes in lost).
func liveShareFloor(shards int, lost []int) float64 {
	live := make([]int, shards)
	for i := range live {
		live[i] = 2
	}
	for _, n := range lost {
		live[n%shards]--
	}
	var shares []float64
	for _, l := range live {
		for range l {
			shares = append(shares, 1/float64(l))
		}
	}
	return maxOverMean(shares)
}

// readSample is one poll of a returned node's GET/MGET count.
type readSample struct {
	after time.Duration // from the thaw to the answer
	calls int64
}

// tookReads returns when a thawed node took reads again: the first sample
// whose count is above the first one's. The first answer after the thaw is
// the baseline because a frozen server runs the commands queued on its
// connections as soon as it resumes, which are not reads of its return.
func tookReads(samples []readSample) (time.Duration, bool) {
	for _, s := range samples[min(1, len(samples)):] {
		if s.calls > samples[0].calls {
			return s.after, true
		}
	}
	return 0, false
}

// spanOf returns the least and the greatest of the non-negative durations
// in ds (a negative one did not happen) and how many there are.
func spanOf(ds []time.Duration) (first, last time.Duration, n int) {
	for _, d := range ds {
		if d < 0 {
			continue
		}
		if n == 0 || d < first {
			first = d
		}
		last = max(last, d)
		n++
	}
	return first, last, n
}

func fleetLoss(o Options) Plan {
	d := o.length(fleetDuration)
	// 30 s of 45 lost, with 7.5 s on either side: the keys are warmed
	// before the run, and a returned node takes reads within about 1.5 s.
	w := [2]time.Duration{(d / 6).Round(time.Millisecond), (5 * d / 6).Round(time.Millisecond)}
	keys := max(1000, int(fleetKeys*keyScale(o)))
	lost := lostHosts(fleetLayout(fleetShards, fleetHosts), fleetShards, fleetLostHosts)
	p := map[string]any{
		"rate_per_s": fleetRate, "keys": keys, "zipf_s": zipfS, "keys_warmed": "written to the Cluster before the run, pipelined",
		"loader_ms": ms(baseLoader), "loader_cap": baseCap, "loader_queue": 0,
		"ttl_s": fleetTTL.Seconds(), "redis_timeout_ms": 100,
		"duration_s": d.Seconds(), "fault_start_s": w[0].Seconds(), "fault_end_s": w[1].Seconds(),
		"latency_from":       "scheduled start (open model)",
		"redis_server":       fmt.Sprintf("cluster of %d primaries + %d replicas, fresh per mode, cluster-node-timeout %v", fleetShards, fleetShards, fleetNodeTimeout),
		"hosts":              fmt.Sprintf("%d modelled hosts of %d nodes; a shard's primary and replica on different hosts", fleetHosts, 2*fleetShards/fleetHosts),
		"lost_nodes":         fleetLostNames(lost),
		"fault":              fmt.Sprintf("SIGSTOP the %d nodes of %d hosts at fault_start_s (their primaries fail over to their replicas), SIGCONT at fault_end_s", len(lost), fleetLostHosts),
		"naive_redis_client": "rueidis cluster client, read-only commands to a node picked at random among the slot's primary and replicas (SendToReplicas + ReadNodeSelector), no client-side cache, no retries, no node health",
		"holdfast_config":    holdfastConfig + "; Redis tier: per-node ejection, random reads over primary + ready replicas",
		"node_reads":         "GET + MGET calls per node from INFO commandstats, over the fault window, live nodes only",
		"return_to_service":  "from the thaw until the node's GET/MGET count rises past its first answer after the thaw (polled every 25 ms)",
	}
	run := func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
		r := &fleetRun{mode: m, keys: keys, lostIdx: lost, w: w, d: d}
		rng := rand.New(rand.NewPCG(9, 9))
		z := rand.NewZipf(rng, zipfS, 1, uint64(keys-1))
		t := Traffic{
			Schedule:   ConstantRate(fleetRate, d, func(int) string { return "product:" + strconv.FormatUint(z.Uint64(), 10) }),
			Duration:   d,
			Window:     w,
			NewCluster: func(ctx context.Context) (*Cluster, error) { return StartFleet(ctx, fleetShards, fleetNodeTimeout) },
			Source:     SourceConfig{Latency: baseLoader, Cap: baseCap},
			Reader: ReaderConfig{TTL: fleetTTL, StaleIfError: 30 * time.Minute,
				Timeout: 100 * time.Millisecond, ReadReplicas: true},
			Setup: r.setup,
			Faults: []Fault{
				{At: w[0], Name: "freeze", Do: r.freeze},
				{At: w[1], Name: "thaw", Do: r.thaw},
			},
			Extra: r.extra,
		}
		return t.RunMode(ctx, o, m)
	}
	return Plan{Params: p, Duration: d, Window: w, RunMode: run,
		Figure: "fault window: holdfast p95 ≤ 5 ms, p99 ≤ 20 ms, 0 errors (the write-up this follows: p95 < 100 ms with 12 of 60 nodes off at peak, 500–1000 ms before); the busiest live node's reads (node_reads_max) ≤ 1.2× naive's node_reads_mean, the even share of a client whose every read reaches Redis"}
}

func fleetLostNames(lost []int) string {
	var b strings.Builder
	for i, n := range lost {
		if i > 0 {
			b.WriteString(", ")
		}
		if n < fleetShards {
			fmt.Fprintf(&b, "primary %d", n)
		} else {
			fmt.Fprintf(&b, "replica %d", n-fleetShards)
		}
	}
	return b.String()
}

// fleetRun is one mode's run of fleet-loss.
type fleetRun struct {
	mode    Mode
	keys    int
	lostIdx []int
	w       [2]time.Duration
	d       time.Duration

	lost []string // addresses of the lost nodes, in lostIdx's order
	// Set on the fault goroutine, read by extra after it ended.
	ejected     []time.Duration // from the freeze; -1: not ejected
	returned    []time.Duration // from the thaw; -1: no read by the run's end
	tierReady   []time.Duration // from the thaw to the tier's ready; -1: not
	atFreeze    map[string]int64
	atThaw      map[string]int64
	failovers   int
	thawed      bool
	ejections0  map[string]uint64
	frozenCount int
}

func (r *fleetRun) setup(f *Fixture) error {
	for _, i := range r.lostIdx {
		r.lost = append(r.lost, f.Cluster.Nodes[i].Addr())
	}
	if err := r.warm(f); err != nil {
		return err
	}
	if err := f.Cluster.WaitHealthy(context.Background(), 60*time.Second); err != nil {
		return err
	}
	if err := waitReplicasListed(f.Cluster, 30*time.Second); err != nil {
		return err
	}
	if n, ok := f.Reader.(*Naive); ok {
		// Built before the replicas had replicated anything, its topology
		// lists none: a service started against a running fleet would.
		if err := n.redial(); err != nil {
			return err
		}
	}
	waitNodesReady(f, 30*time.Second)
	time.Sleep(redis.DefaultPrimaryAfterWrite + 100*time.Millisecond)
	return nil
}

// warm writes every key to the Cluster as the mode stores it (holdfast's
// envelope under its namespace, the naive mode's bare value), pipelined
// through a plain client: 100,000 loads at 12 ms would take minutes.
func (r *fleetRun) warm(f *Fixture) error {
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: f.Cluster.Addrs(), DisableCache: true})
	if err != nil {
		return fmt.Errorf("warm: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stored := storedKey(r.mode)
	now := time.Now()
	ttl := fleetTTL
	cmds := make(rueidis.Commands, 0, 1000)
	flush := func() error {
		for _, res := range cl.DoMulti(ctx, cmds...) {
			if err := res.Error(); err != nil {
				return fmt.Errorf("warm: %w", err)
			}
		}
		cmds = cmds[:0]
		return nil
	}
	for i := range r.keys {
		key := "product:" + strconv.Itoa(i)
		// Version 0: nothing writes to the source in this scenario.
		v := f.Source.value(key, 0)
		if r.mode.Name == "holdfast" {
			e := tier.Entry{Value: v, Origin: now, Soft: now.Add(ttl * 8 / 10), Hard: now.Add(ttl)}
			v = tier.AppendEntry(nil, e)
		}
		px := ttl
		if r.mode.Name == "holdfast" {
			px += 30 * time.Minute // holdfast keeps a value past hard for stale-if-error
		}
		cmds = append(cmds, cl.B().Set().Key(stored(key)).Value(rueidis.BinaryString(v)).PxMilliseconds(px.Milliseconds()).Build())
		if len(cmds) == cap(cmds) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// readsOf returns each server's GET + MGET calls (INFO commandstats), -1
// where it did not answer within 500 ms; all asked at once.
func readsOf(addrs []string) map[string]int64 {
	out := make(map[string]int64, len(addrs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := readCallsAt(a, 500*time.Millisecond)
			mu.Lock()
			out[a] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// readCallsAt is readCalls of the server at addr; -1 when it does not
// answer within timeout.
func readCallsAt(addr string, timeout time.Duration) int64 {
	s, err := Command(addr, timeout, "INFO", "commandstats")
	if err != nil {
		return -1
	}
	return readCalls(parseInfo(s))
}

func (r *fleetRun) liveAddrs(f *Fixture) []string {
	var out []string
	for _, a := range f.Cluster.Addrs() {
		if !slices.Contains(r.lost, a) {
			out = append(out, a)
		}
	}
	return out
}

// freeze stops the lost nodes together and, in the holdfast mode, watches
// the tier's figures for them every 5 ms until each is ejected or the thaw
// is near.
func (r *fleetRun) freeze(ctx context.Context, f *Fixture) error {
	r.atFreeze = readsOf(r.liveAddrs(f))
	r.ejected = slices.Repeat([]time.Duration{-1}, len(r.lost))
	r.ejections0 = map[string]uint64{}
	for _, a := range r.lost {
		if s, ok := nodeStat(f.Reader, a); ok {
			r.ejections0[a] = s.Ejections
		}
	}
	at := time.Now()
	for _, i := range r.lostIdx {
		if err := f.Cluster.Nodes[i].Freeze(); err != nil {
			return err
		}
		r.frozenCount++
	}
	if _, ok := nodeStats(f.Reader); !ok {
		return nil
	}
	end := f.Start.Add(r.w[1] - 20*time.Millisecond)
	for left := len(r.lost); left > 0 && time.Now().Before(end); {
		for i, a := range r.lost {
			if r.ejected[i] >= 0 {
				continue
			}
			if s, ok := nodeStat(f.Reader, a); ok && s.Ejections > r.ejections0[a] {
				r.ejected[i] = s.LastEjected.Sub(at)
				left--
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// thaw counts the failovers, resumes the lost nodes, and polls them every
// 25 ms until each has taken reads again (and, for holdfast, is ready in
// the tier) or the run ends.
func (r *fleetRun) thaw(ctx context.Context, f *Fixture) error {
	r.atThaw = readsOf(r.liveAddrs(f))
	for _, i := range r.lostIdx {
		if i >= fleetShards {
			continue
		}
		if role, err := Role(f.Cluster.Nodes[fleetShards+i].Addr()); err == nil && role == "primary" {
			r.failovers++
		}
	}
	for _, i := range r.lostIdx {
		if err := f.Cluster.Nodes[i].Thaw(); err != nil {
			return err
		}
	}
	at := time.Now()
	r.thawed = true
	r.returned = slices.Repeat([]time.Duration{-1}, len(r.lost))
	r.tierReady = slices.Repeat([]time.Duration{-1}, len(r.lost))
	_, tiered := nodeStats(f.Reader)
	samples := make([][]readSample, len(r.lost))
	end := f.Start.Add(r.d - 50*time.Millisecond)
	for time.Now().Before(end) {
		var wg sync.WaitGroup
		for i, a := range r.lost {
			if r.returned[i] >= 0 {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if n := readCallsAt(a, 200*time.Millisecond); n >= 0 {
					samples[i] = append(samples[i], readSample{after: time.Since(at), calls: n})
					if d, ok := tookReads(samples[i]); ok {
						r.returned[i] = d
					}
				}
			}()
		}
		wg.Wait()
		done := true
		for i, a := range r.lost {
			if tiered && r.tierReady[i] < 0 {
				if s, ok := nodeStat(f.Reader, a); ok && s.State == redis.NodeReady {
					r.tierReady[i] = time.Since(at)
				}
			}
			done = done && r.returned[i] >= 0 && (!tiered || r.tierReady[i] >= 0)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(25 * time.Millisecond):
		}
	}
	return nil
}

func (r *fleetRun) extra(f *Fixture, res *ModeResult) {
	res.Extra["cluster_nodes"] = float64(len(f.Cluster.Nodes))
	res.Extra["nodes_lost"] = float64(r.frozenCount)
	res.Extra["failovers"] = float64(r.failovers)
	if res.Requests > 0 {
		res.Extra["hot_tier_share"] = res.Extra["hf_hot_hits"] / float64(res.Requests)
	}
	if first, last, n := spanOf(r.ejected); n > 0 {
		res.Extra["first_ejection_ms"] = ms(first)
		res.Extra["last_ejection_ms"] = ms(last)
		res.Extra["nodes_ejected"] = float64(n)
	}
	if r.thawed {
		_, last, n := spanOf(r.returned)
		res.Extra["nodes_returned"] = float64(n)
		if n > 0 {
			res.Extra["return_to_service_ms_max"] = ms(last)
		}
		if _, ok := nodeStats(f.Reader); ok {
			if _, last, n := spanOf(r.tierReady); n > 0 {
				res.Extra["tier_ready_after_thaw_ms_max"] = ms(last)
			}
		}
	}
	var reads []float64
	shardReads := make([]float64, fleetShards)
	for i, a := range f.Cluster.Addrs() {
		before, ok1 := r.atFreeze[a]
		after, ok2 := r.atThaw[a]
		if ok1 && ok2 && before >= 0 && after >= before {
			reads = append(reads, float64(after-before))
			shardReads[i%fleetShards] += float64(after - before)
		}
	}
	if len(reads) > 0 {
		res.Extra["node_reads_max_over_mean"] = maxOverMean(reads)
		top, sum := 0.0, 0.0
		for _, n := range reads {
			top, sum = max(top, n), sum+n
		}
		res.Extra["node_reads_max"] = top
		res.Extra["node_reads_mean"] = sum / float64(len(reads))
		res.Extra["node_reads_live_nodes"] = float64(len(reads))
		// The same reads summed per shard: the keys' own skew, which no
		// choice among a shard's nodes changes.
		res.Extra["shard_reads_max_over_mean"] = maxOverMean(shardReads)
	}
	res.Extra["node_reads_max_over_mean_floor"] = liveShareFloor(fleetShards, r.lostIdx)
}
