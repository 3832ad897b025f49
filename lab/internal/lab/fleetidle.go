package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fleet-idle: what idle processes cost a Redis Cluster. N Caches, each with
// a Redis tier of its own as N service processes would have, read nothing;
// the servers' own counters say what their background work costs each node:
// INFO CPU (used_cpu_sys + used_cpu_user) and INFO commandstats, sampled on
// every node at the start and the end of a window, with the same window
// measured with no Cache first (the Cluster's own bus traffic, and these
// samples). A node's cost per process is (its CPU over the window with N
// Caches - with none) / N, averaged over the nodes; the projection to
// 1,000 processes is the idle Cluster's cost plus 1,000 times that.
//
// The Caches run in child processes of idleChunk Caches each: a Cache on a
// 30 + 30 Cluster holds about 180 connections, and one process's file
// descriptors run out before 200 Caches do.
//
// It is not part of -scenario all (its Clusters and 200 Caches take about
// fifteen minutes on their own): run it by name.

const (
	idleChunk = 25
	// idleSettle is the wait after a step's Caches started before its
	// window: past their first minute, when the slot map is refreshed
	// every second (a start is a change), and the startup's own work.
	idleSettle      = 65 * time.Second
	idleWindow      = 20 * time.Second
	idleNodeTimeout = 15 * time.Second // redis.conf's default
	// idleDialTimeout is the children's connect timeout: starting the
	// 200th Cache's 180 connections with 199 running beside them took
	// longer than the default second on 2 cores.
	idleDialTimeout = 5 * time.Second
	idleChildKind   = "idle"
	idleAddrsEnv    = "HOLDFAST_LAB_IDLE_ADDRS"
	idleCountEnv    = "HOLDFAST_LAB_IDLE_CACHES"
)

// DefaultIdleCaches and DefaultIdleShards are fleet-idle's steps: the
// Cache counts measured, in order, on each Cluster size (primaries, each
// with one replica).
var (
	DefaultIdleCaches = []int{1, 10, 50, 200}
	DefaultIdleShards = []int{3, 30}
)

func init() {
	Register(Scenario{
		Name:      "fleet-idle",
		Summary:   "1, 10, 50 and 200 idle Caches on a 3+3 and a 30+30 Cluster: each node's CPU per process from INFO CPU, the commands per process per node from INFO commandstats, and the projection to 1,000 processes.",
		OnlyModes: []string{"holdfast"},
		Separate:  true,
		Plan:      fleetIdle,
	})
}

func fleetIdle(o Options) Plan {
	caches, shards := o.IdleCaches, o.IdleShards
	if len(caches) == 0 {
		caches = DefaultIdleCaches
	}
	if len(shards) == 0 {
		shards = DefaultIdleShards
	}
	window := o.length(idleWindow)
	return Plan{
		Params: map[string]any{
			"caches": caches, "shards": shards, "window_s": window.Seconds(),
			"settle_s": idleSettle.Seconds(), "node_timeout_s": idleNodeTimeout.Seconds(),
		},
		Figure: "cpu_pct_per_process_node at 200 Caches on both Clusters (target at most 0.01), beside projected_1000_pct_node",
		RunMode: func(ctx context.Context, o Options, m Mode) (ModeResult, error) {
			if m.Name != "holdfast" {
				return ModeResult{}, &MissingError{Part: "fleet-idle measures holdfast only"}
			}
			res := ModeResult{Extra: map[string]float64{}}
			for _, sh := range shards {
				// A step that cannot run (Caches that do not start on a
				// saturated machine) ends its Cluster size, not the run:
				// what was measured stands, and the failure is a figure.
				if err := idleCluster(ctx, o, sh, caches, window, res.Extra); err != nil {
					if ctx.Err() != nil {
						return res, err
					}
					o.logf("fleet-idle: %d+%d: %v", sh, sh, err)
					res.Extra[fmt.Sprintf("c%d_failed_at_caches", sh)] = res.Extra[fmt.Sprintf("c%d_trying", sh)]
				}
				delete(res.Extra, fmt.Sprintf("c%d_trying", sh))
			}
			return res, nil
		},
	}
}

// idleSample is one node's counters at one moment.
type idleSample struct {
	cpu   float64 // seconds, sys + user
	calls map[string]float64
	usec  map[string]float64
}

func sampleIdle(addr string) (idleSample, error) {
	// 200 Caches on 60 nodes can hold the machine's 2 cores for seconds:
	// a sample is tried three times.
	var text string
	var err error
	for range 3 {
		if text, err = Command(addr, 5*time.Second, "INFO", "cpu", "commandstats"); err == nil {
			break
		}
	}
	if err != nil {
		return idleSample{}, err
	}
	s, err := parseIdleSample(text)
	if err != nil {
		return s, fmt.Errorf("%s: %w", addr, err)
	}
	return s, nil
}

// parseIdleSample reads INFO cpu commandstats.
func parseIdleSample(text string) (idleSample, error) {
	s := idleSample{calls: map[string]float64{}, usec: map[string]float64{}}
	info := parseInfo(text)
	sys, err1 := strconv.ParseFloat(info["used_cpu_sys"], 64)
	user, err2 := strconv.ParseFloat(info["used_cpu_user"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return s, fmt.Errorf("INFO cpu: %w", err)
	}
	s.cpu = sys + user
	for k, v := range info {
		cmd, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(val, 64)
			switch name {
			case "calls":
				s.calls[cmd] = x
			case "usec":
				s.usec[cmd] = x
			}
		}
	}
	return s, nil
}

// idleRates is a window's totals over every node: CPU in cores (per node,
// mean), and each command's calls a second and microseconds (all nodes).
type idleRates struct {
	cpuPerNode float64
	calls      map[string]float64 // a second, every node together
	usec       map[string]float64 // a second, every node together
}

// measureIdle samples every node, waits window and samples again.
func measureIdle(ctx context.Context, c *Cluster, window time.Duration) (idleRates, error) {
	sample := func() ([]idleSample, error) {
		out := make([]idleSample, len(c.Nodes))
		for i, n := range c.Nodes {
			s, err := sampleIdle(n.Addr())
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	before, err := sample()
	if err != nil {
		return idleRates{}, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return idleRates{}, ctx.Err()
	case <-time.After(window):
	}
	after, err := sample()
	if err != nil {
		return idleRates{}, err
	}
	secs := time.Since(t0).Seconds()
	r := idleRates{calls: map[string]float64{}, usec: map[string]float64{}}
	for i := range after {
		r.cpuPerNode += (after[i].cpu - before[i].cpu) / secs / float64(len(after))
		for cmd, v := range after[i].calls {
			r.calls[cmd] += (v - before[i].calls[cmd]) / secs
			r.usec[cmd] += (after[i].usec[cmd] - before[i].usec[cmd]) / secs
		}
	}
	return r, nil
}

// idleCluster measures one Cluster size: the idle Cluster, then each count
// of Caches, into extra.
func idleCluster(ctx context.Context, o Options, shards int, caches []int, window time.Duration, extra map[string]float64) error {
	o.logf("fleet-idle: starting a %d+%d Cluster", shards, shards)
	c, err := StartFleet(ctx, shards, idleNodeTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	nodes := float64(len(c.Nodes))
	prefix := fmt.Sprintf("c%d_", shards)
	o.logf("fleet-idle: %d+%d, no Cache", shards, shards)
	base, err := measureIdle(ctx, c, window)
	if err != nil {
		return err
	}
	extra[prefix+"n0_cpu_pct_node"] = 100 * base.cpuPerNode
	var kids []*child
	defer func() {
		for _, k := range kids {
			k.close()
		}
	}()
	have := 0
	for _, n := range caches {
		extra[prefix+"trying"] = float64(n)
		for have < n {
			add := min(idleChunk, n-have)
			k, err := launchChild(ctx, childEnv+"="+idleChildKind,
				idleAddrsEnv+"="+strings.Join(c.Addrs(), ","), idleCountEnv+"="+strconv.Itoa(add))
			if err != nil {
				return err
			}
			kids = append(kids, k)
			if err := k.waitReady(6 * time.Minute); err != nil {
				kids = kids[:len(kids)-1]
				return err
			}
			have += add
		}
		o.logf("fleet-idle: %d+%d, %d idle Caches", shards, shards, n)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(idleSettle):
		}
		r, err := measureIdle(ctx, c, window)
		if err != nil {
			return err
		}
		p := fmt.Sprintf("%sn%d_", prefix, n)
		per := (r.cpuPerNode - base.cpuPerNode) / float64(n)
		extra[p+"cpu_pct_node"] = 100 * r.cpuPerNode
		extra[p+"cpu_pct_per_process_node"] = 100 * per
		extra[p+"projected_1000_pct_node"] = 100 * (base.cpuPerNode + 1000*per)
		o.logf("fleet-idle: %d+%d, %d Caches: %.3f%% of a core per node, %.5f%% per process per node (idle Cluster %.3f%%), 1,000 processes: %.1f%%",
			shards, shards, n, 100*r.cpuPerNode, 100*per, 100*base.cpuPerNode, 100*(base.cpuPerNode+1000*per))
		cmds := make([]string, 0, len(r.calls))
		for cmd := range r.calls {
			cmds = append(cmds, cmd)
		}
		sort.Strings(cmds)
		for _, cmd := range cmds {
			calls := (r.calls[cmd] - base.calls[cmd]) / nodes / float64(n)
			if calls < 1e-4 {
				continue
			}
			name := strings.ReplaceAll(cmd, "|", "_")
			extra[p+name+"_calls_s_per_process_node"] = calls
			extra[p+name+"_usec_per_call"] = r.usec[cmd] / r.calls[cmd]
		}
	}
	return nil
}

// idleChildMain is a fleet-idle child: it builds its Caches over the
// Cluster, says ready, and closes them when stdin ends.
func idleChildMain(stdin io.Reader, stdout io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "holdfast-lab idle child: %v\n", err)
		return 1
	}
	n, err := strconv.Atoi(os.Getenv(idleCountEnv))
	if err != nil || n <= 0 || n > 1000 {
		return fail(fmt.Errorf("bad Cache count %q", os.Getenv(idleCountEnv)))
	}
	addrs := strings.Split(os.Getenv(idleAddrsEnv), ",")
	src := NewSource(SourceConfig{Latency: baseLoader})
	readers := make([]Reader, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// New may time out on a machine this many Caches saturate:
			// tried three times.
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				readers[i], errs[i] = NewHoldfast(ctx, ReaderConfig{RedisAddrs: addrs, DialTimeout: idleDialTimeout, Load: src.Load, TTL: baseTTL})
				cancel()
				if errs[i] == nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, r := range readers {
			if r != nil {
				r.Close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	fmt.Fprintln(stdout, "ready")
	_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
	return 0
}
