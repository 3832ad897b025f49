package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// redis-restart-refill: a profile service's read path, 200 req/s over
// 1,000 keys of Zipf popularity with a long TTL, has Redis killed and
// restarted empty. Every process still holds the values it read in its
// last-known-good store; the figure is how many database loads refill
// Redis in the 30 s after the restart, beside the steady rate of the
// 30 s before the kill. holdfast writes the copies it holds current back
// (tier.Refiller) and loads only the keys it does not; cache-aside
// (naive) loads every key it misses.

const (
	refillKeys  = 1000
	refillZipfS = 1.1
	// A profile's TTL: minutes, so that the 30 s after the restart would
	// have needed few loads had Redis kept its data.
	refillTTL = 5 * time.Minute
	// The run: 40 s of traffic, Redis down for 3 s, 30 s after.
	refillKillAt    = 40 * time.Second
	refillOutage    = 3 * time.Second
	refillAfter     = 30 * time.Second
	refillSteadyLen = 30 * time.Second
)

func init() {
	// Run by name: 73 s a mode would add five minutes to -scenario all.
	Register(Scenario{Name: "redis-restart-refill", Separate: true, Summary: "200 req/s over 1,000 Zipf keys (TTL 5 min); Redis killed at 40 s and restarted empty 3 s later: database loads in the 30 s after the restart against the 30 s before the kill.", Plan: func(o Options) Plan { return redisRestartRefill(o, refillStandalone) }})
	Register(Scenario{Name: "redis-restart-refill-cluster", Separate: true, Summary: "redis-restart-refill on a 3+3 Cluster: one primary killed at 40 s and restarted empty at once, before any failover (its replica then resyncs empty from it): database loads in the 30 s after.", Plan: func(o Options) Plan { return redisRestartRefill(o, refillPrimaryRestarted) }})
	Register(Scenario{Name: "redis-restart-refill-failover", Separate: true, Summary: "redis-restart-refill on a 3+3 Cluster: at 40 s one primary's replica is killed and restarted empty, the primary killed, and the empty replica takes over its slots (CLUSTER FAILOVER TAKEOVER): database loads in the 30 s after.", Plan: func(o Options) Plan { return redisRestartRefill(o, refillEmptyReplicaPromoted) }})
}

// The shapes redisRestartRefill runs on.
const (
	refillStandalone           = iota // one server, killed and restarted empty
	refillPrimaryRestarted            // a Cluster primary restarted empty within the node timeout
	refillEmptyReplicaPromoted        // a Cluster primary replaced by its replica, restarted empty
)

// redisRestartRefill builds the scenario: standalone; on a 3+3 Cluster
// whose first primary is restarted empty within the node timeout, so that
// it stays the primary of its slots with none of their keys; or on one
// where a primary's replica, restarted empty while the primary is down,
// takes the primary's slots over with none of their keys.
func redisRestartRefill(o Options, shape int) Plan {
	cluster := shape != refillStandalone
	def := refillKillAt + refillOutage + refillAfter
	d := o.length(def)
	scale := float64(d) / float64(def)
	at := func(x time.Duration) time.Duration { return time.Duration(float64(x) * scale).Round(time.Millisecond) }
	kill, restart := at(refillKillAt), at(refillKillAt+refillOutage)
	steady0 := kill - at(refillSteadyLen)
	rng := rand.New(rand.NewPCG(29, 29))
	z := rand.NewZipf(rng, refillZipfS, 1, refillKeys-1)
	t := Traffic{
		Schedule: ConstantRate(baseRate, d, func(int) string { return fmt.Sprintf("profile:%d", z.Uint64()) }),
		Duration: d,
		Window:   [2]time.Duration{kill, restart},
		Source:   SourceConfig{Latency: baseLoader, Cap: baseCap},
		Reader:   ReaderConfig{TTL: refillTTL, StaleIfError: baseStaleIfError, Timeout: 100 * time.Millisecond},
		Faults: []Fault{
			{At: kill, Name: "kill", Do: func(_ context.Context, f *Fixture) error { f.Redis.Kill(); return nil }},
			{At: restart, Name: "restart", Do: func(ctx context.Context, f *Fixture) error { return f.Redis.Restart() }},
		},
	}
	if cluster {
		// Restarted at once: down for milliseconds, well within the
		// 2 s node timeout, so no replica takes over.
		restart = kill
		t.Cluster = true
		t.Window = [2]time.Duration{kill, kill + time.Second}
		t.Faults = []Fault{{At: kill, Name: "restart a primary empty", Do: func(_ context.Context, f *Fixture) error {
			for _, n := range f.Cluster.Nodes {
				if role, err := Role(n.Addr()); err == nil && role == "primary" {
					return n.Restart()
				}
			}
			return errors.New("no primary in the cluster")
		}}}
		if shape == refillEmptyReplicaPromoted {
			t.Faults = []Fault{{At: kill, Name: "promote an empty replica", Do: promoteEmptyReplica}}
		}
	}
	t.Extra = func(f *Fixture, r *ModeResult) {
		per := f.Source.CallsPerSecond()
		sum := func(from, to time.Duration) float64 {
			var n int64
			for s := int(from / time.Second); s < int((to+time.Second-1)/time.Second) && s < len(per); s++ {
				if s >= 0 {
					n += per[s]
				}
			}
			return float64(n)
		}
		after := sum(restart, restart+at(refillAfter))
		steady := sum(steady0, kill)
		r.Extra["loads_after_restart"] = after
		r.Extra["loads_steady"] = steady
		if steady > 0 {
			r.Extra["after_over_steady"] = after / steady
		}
	}
	p := baseParams(d, t.Window)
	p["keys"], p["zipf_s"], p["ttl_s"] = refillKeys, refillZipfS, refillTTL.Seconds()
	p["fault"] = "SIGKILL redis-server at fault_start_s, restarted empty at fault_end_s"
	if cluster {
		p["redis_server"] = "cluster of 3 primaries + 3 replicas, fresh per mode"
		p["fault"] = "SIGKILL one primary at fault_start_s and restart it at once, empty, on the same port and node id (no failover: within the 2 s node timeout)"
	}
	if shape == refillEmptyReplicaPromoted {
		p["fault"] = "at fault_start_s SIGKILL one primary's replica and restart it empty (same port and node id), SIGKILL the primary, and CLUSTER FAILOVER TAKEOVER on the empty replica, which then holds the slots with none of their keys; the old primary stays down"
	}
	p["after_window_s"] = at(refillAfter).Seconds()
	p["steady_window_s"] = [2]float64{steady0.Seconds(), kill.Seconds()}
	return Plan{Params: p, Duration: d, Window: t.Window, RunMode: t.RunMode,
		Marks:  []Mark{{At: kill, Label: "kill"}, {At: restart, Label: "restart empty"}},
		Figure: "loads_after_restart: database loads in the 30 s after Redis restarted empty (holdfast ≤ 0.25× naive's), beside loads_steady, the 30 s before the kill"}
}

// promoteEmptyReplica makes a Cluster primary's replica its successor with
// none of the slots' keys: the replica is killed and restarted empty, then
// the primary killed before the replica can resync from it, and the replica
// forced to take the slots over.
func promoteEmptyReplica(ctx context.Context, f *Fixture) error {
	var primary, replica *redistest.Process
	for _, n := range f.Cluster.Nodes {
		if role, err := Role(n.Addr()); err != nil || role != "primary" {
			continue
		}
		for _, r := range f.Cluster.Nodes {
			info, err := r.Info(ctx, "replication")
			if err == nil && info["role"] == "slave" && info["master_port"] == strconv.Itoa(n.Port()) {
				primary, replica = n, r
				break
			}
		}
		if primary != nil {
			break
		}
	}
	if primary == nil {
		return errors.New("no primary with a replica in the cluster")
	}
	replica.Kill()
	primary.Kill()
	if err := replica.Restart(); err != nil {
		return err
	}
	out, err := replica.CLI(ctx, "CLUSTER", "FAILOVER", "TAKEOVER")
	if err != nil || out != "OK" {
		return fmt.Errorf("CLUSTER FAILOVER TAKEOVER on %s: %q, %v", replica.Addr(), out, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if role, err := Role(replica.Addr()); err == nil && role == "primary" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become a primary within 10 s", replica.Addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
