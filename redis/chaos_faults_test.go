package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The chaos test's fault schedule. Faults run one at a time on the test's
// goroutine (redistest calls t.Fatal), each followed by a wait until the
// cluster has healed (cluster_state:ok everywhere, replicas linked and in
// sync, one agreed slot map with no open slot), so that no two node faults
// overlap and the cluster is never driven past what it can recover from.

// Fault kinds.
const (
	faultFreeze    = "freeze"     // SIGSTOP for 1–5 s, then SIGCONT
	faultKill      = "kill"       // SIGKILL, down 0.5–3 s, restarted empty
	faultKillData  = "kill+data"  // a replica: SAVE, SIGKILL, down 0.5–3 s, restarted with that snapshot
	faultDBSlow    = "db-slow"    // loader latency 200–800 ms
	faultDBFailing = "db-failing" // loader errors
	faultReshard   = "reshard"    // 100–2,000 slots between two primaries (100–600 in a short run)
	faultFailover  = "failover"   // CLUSTER FAILOVER on a replica
	faultTakeover  = "takeover"   // CLUSTER FAILOVER TAKEOVER on a replica
	faultAdd       = "add-primary"
	faultRemove    = "remove-primary"
)

var chaosFaultKinds = []string{faultFreeze, faultKill, faultKillData, faultDBSlow, faultDBFailing,
	faultReshard, faultFailover, faultTakeover, faultAdd, faultRemove}

func isDBFault(kind string) bool { return kind == faultDBSlow || kind == faultDBFailing }

// losesWrites reports a fault in which Redis may drop writes it
// acknowledged: a primary killed and restarted empty (what its replica had
// not received yet), or a TAKEOVER, after which the old primary accepts
// writes until it hears of the new epoch and then discards them. A lease
// taken there, or a release that landed there, is lost, and readers of its
// key wait as for a dead holder: at most Lease.TTL + LoadTimeout.
func losesWrites(f chaosFault) bool {
	return (f.kind == faultKill && strings.HasSuffix(f.target, "(primary)")) || f.kind == faultTakeover
}

// chaosFault is one injected fault. Times are Unix nanoseconds.
type chaosFault struct {
	phase  int
	kind   string
	target string // "addr (role)", or the slots moved
	start  int64  // the fault began (signal sent, command started)
	end    int64  // the fault itself ended (thawed, restarted, command returned)
	healed int64  // the cluster was stable again (end for database faults)
	err    string // what went wrong injecting or healing, if anything
}

func (f chaosFault) String() string {
	s := fmt.Sprintf("%s %s", f.kind, f.target)
	if f.err != "" {
		s += " (error: " + f.err + ")"
	}
	return s
}

// chaosSettle is how long after a fault healed its effects are still
// attributed to it: topology refreshes (1 s), readiness polls (1 s) and
// probes catch up within it.
const chaosSettle = time.Second

type chaosScheduler struct {
	t     *testing.T
	cl    *redistest.RedisCluster
	db    *chaosDB
	rng   *rand.Rand
	epoch time.Time
	heal  time.Duration // bound of one wait for the cluster to heal
	logf  func(format string, args ...any)
	// maxSlots bounds the slots a reshard or a new primary takes: 2,000,
	// or fewer in a short run, since under traffic redis-cli moves about
	// 150 slots a second on 2 cores.
	maxSlots int
	added    *redistest.Server
	failed   error // the first harness failure: the cluster did not heal

	mu     sync.Mutex
	faults []chaosFault
	addrs  []string // the nodes now, for the probes (Nodes must not be read concurrently)
}

// nodeAddrs returns the cluster's node addresses as of the last fault.
func (s *chaosScheduler) nodeAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs)
}

func (s *chaosScheduler) rel(ns int64) string {
	return fmt.Sprintf("%.2fs", time.Duration(ns-s.epoch.UnixNano()).Seconds())
}

func (s *chaosScheduler) record(f chaosFault) {
	addrs := s.cl.Addrs()
	s.mu.Lock()
	s.faults = append(s.faults, f)
	s.addrs = addrs
	s.mu.Unlock()
	s.logf("fault %-14s %-32s %s–%s healed %s %s", f.kind, f.target, s.rel(f.start), s.rel(f.end), s.rel(f.healed), f.err)
}

func (s *chaosScheduler) snapshot() []chaosFault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.faults)
}

func (s *chaosScheduler) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// waitStable waits for the cluster to heal and records a harness failure if
// it does not.
func (s *chaosScheduler) waitStable(f *chaosFault) {
	ctx, cancel := context.WithTimeout(context.Background(), s.heal)
	defer cancel()
	if err := s.cl.WaitStable(ctx); err != nil {
		f.err = strings.TrimSpace(f.err + " " + err.Error())
		if s.failed == nil {
			s.failed = fmt.Errorf("after %s: %w", f, err)
		}
	}
	f.healed = time.Now().UnixNano()
}

func (s *chaosScheduler) role(n *redistest.Server) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := n.Info(ctx, "replication")
	if err != nil {
		return "unknown"
	}
	if info["role"] == "master" {
		return "primary"
	}
	return "replica"
}

func (s *chaosScheduler) randomNode() *redistest.Server {
	nodes := s.cl.Nodes()
	return nodes[s.rng.IntN(len(nodes))]
}

// run injects one fault of kind. It returns false once the cluster failed
// to heal, after which nothing more is injected.
func (s *chaosScheduler) run(phase int, kind string) bool {
	if s.failed != nil {
		return false
	}
	f := chaosFault{phase: phase, kind: kind}
	switch kind {
	case faultFreeze:
		n := s.randomNode()
		d := s.between(time.Second, 5*time.Second)
		f.target = fmt.Sprintf("%s (%s) %.1fs", n.Addr(), s.role(n), d.Seconds())
		f.start = time.Now().UnixNano()
		n.Freeze()
		time.Sleep(d)
		n.Thaw()
		f.end = time.Now().UnixNano()
		s.waitStable(&f)
	case faultKill, faultKillData:
		n := s.randomNode()
		role := s.role(n)
		if kind == faultKillData && role != "replica" {
			// A primary restarted from an old snapshot before its replica
			// took over serves the deletes it lost as if they never
			// happened: no cache can hide that, so only replicas come
			// back with their data.
			for _, r := range s.cl.Replicas(context.Background()) {
				n, role = r, "replica"
				break
			}
			if role != "replica" {
				kind, f.kind = faultKill, faultKill
			}
		}
		d := s.between(500*time.Millisecond, 3*time.Second)
		f.target = fmt.Sprintf("%s (%s) %.1fs", n.Addr(), role, d.Seconds())
		if kind == faultKillData {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := n.CLI(ctx, "SAVE")
			cancel()
			if err != nil {
				f.err = "SAVE: " + err.Error()
			}
		}
		f.start = time.Now().UnixNano()
		n.Kill()
		time.Sleep(d)
		if kind == faultKillData {
			n.Start()
		} else {
			n.Restart()
		}
		f.end = time.Now().UnixNano()
		s.waitStable(&f)
	case faultDBSlow, faultDBFailing:
		d := s.between(1500*time.Millisecond, 3*time.Second)
		f.target = fmt.Sprintf("%.1fs", d.Seconds())
		mode := chaosDBSlow
		if kind == faultDBFailing {
			mode = chaosDBFailing
		}
		f.start = time.Now().UnixNano()
		s.db.mode.Store(mode)
		time.Sleep(d)
		s.db.mode.Store(chaosDBNormal)
		f.end = time.Now().UnixNano()
		f.healed = f.end
	case faultReshard:
		from, to, n, ok := s.pickReshard()
		if !ok {
			return true
		}
		f.target = fmt.Sprintf("%d slots %s→%s", n, from.Addr(), to.Addr())
		f.start = time.Now().UnixNano()
		ctx, cancel := context.WithTimeout(context.Background(), s.heal)
		err := s.cl.Reshard(ctx, from, to, n)
		cancel()
		f.end = time.Now().UnixNano()
		s.fail(&f, err)
	case faultFailover, faultTakeover:
		reps := s.cl.Replicas(context.Background())
		if len(reps) == 0 {
			s.fail(&f, fmt.Errorf("no replica answers"))
			break
		}
		r := reps[s.rng.IntN(len(reps))]
		f.target = r.Addr() + " (replica)"
		f.start = time.Now().UnixNano()
		ctx, cancel := context.WithTimeout(context.Background(), s.heal)
		old, err := s.cl.Failover(ctx, r, kind == faultTakeover)
		cancel()
		if old != nil {
			f.target += " over " + old.Addr()
		}
		f.end = time.Now().UnixNano()
		s.fail(&f, err)
	case faultAdd:
		n := int(s.between(100, time.Duration(s.maxSlots)))
		f.start = time.Now().UnixNano()
		ctx, cancel := context.WithTimeout(context.Background(), s.heal)
		added, err := s.cl.AddPrimary(ctx, n)
		cancel()
		s.added = added
		f.target = fmt.Sprintf("%s with %d slots", added.Addr(), n)
		f.end = time.Now().UnixNano()
		s.fail(&f, err)
	case faultRemove:
		if s.added == nil {
			return true
		}
		var to *redistest.Server
		for _, p := range s.cl.Primaries(context.Background()) {
			if p != s.added && (to == nil || s.rng.IntN(2) == 0) {
				to = p
			}
		}
		f.target = s.added.Addr() + " → " + to.Addr()
		f.start = time.Now().UnixNano()
		ctx, cancel := context.WithTimeout(context.Background(), s.heal)
		err := s.cl.RemovePrimary(ctx, s.added, to)
		cancel()
		s.added = nil
		f.end = time.Now().UnixNano()
		s.fail(&f, err)
	default:
		panic("unknown fault " + kind)
	}
	s.record(f)
	return s.failed == nil
}

// fail records err, if any, as the fault's harness failure; the cluster
// methods wait for a stable cluster themselves, so healed is when they
// returned.
func (s *chaosScheduler) fail(f *chaosFault, err error) {
	f.healed = time.Now().UnixNano()
	if err != nil {
		f.err = err.Error()
		if s.failed == nil {
			s.failed = fmt.Errorf("%s: %w", f, err)
		}
	}
}

// pickReshard chooses two primaries and a number of slots, 100 to 2,000,
// leaving the source at least 1,000 slots so that no primary empties (an
// emptied primary turns into a replica of the node that took its slots).
func (s *chaosScheduler) pickReshard() (from, to *redistest.Server, n int, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := s.cl.SlotCounts(ctx)
	if err != nil {
		return nil, nil, 0, false
	}
	var rich, all []*redistest.Server
	for _, p := range s.cl.Primaries(ctx) {
		if _, known := counts[p.Addr()]; !known {
			continue
		}
		all = append(all, p)
		if counts[p.Addr()] >= 1100 {
			rich = append(rich, p)
		}
	}
	if len(rich) == 0 || len(all) < 2 {
		return nil, nil, 0, false
	}
	from = rich[s.rng.IntN(len(rich))]
	for to == nil || to == from {
		to = all[s.rng.IntN(len(all))]
	}
	n = min(int(s.between(100, time.Duration(s.maxSlots))), counts[from.Addr()]-1000)
	return from, to, n, true
}

// phase runs the mandatory kinds in a random order, then random kinds from
// extra until deadline, with 0.3–1 s of undisturbed traffic before each.
// The mandatory ones run even past the deadline, so that a short run still
// covers every kind once.
func (s *chaosScheduler) phase(phase int, mandatory, extra []string, deadline time.Time) {
	steps := slices.Clone(mandatory)
	s.rng.Shuffle(len(steps), func(i, j int) { steps[i], steps[j] = steps[j], steps[i] })
	// A removal comes after the addition it undoes.
	if i, j := slices.Index(steps, faultAdd), slices.Index(steps, faultRemove); i >= 0 && j >= 0 && j < i {
		steps[i], steps[j] = steps[j], steps[i]
	}
	for i := 0; i < 1000; i++ { // bounded: each step takes at least 0.3 s
		var kind string
		switch {
		case i < len(steps):
			kind = steps[i]
		case time.Now().After(deadline):
		case s.added != nil:
			kind = faultRemove
		default:
			kind = extra[s.rng.IntN(len(extra))]
		}
		if kind == "" {
			break
		}
		time.Sleep(s.between(300*time.Millisecond, time.Second))
		if !s.run(phase, kind) {
			return
		}
	}
	if s.added != nil {
		s.run(phase, faultRemove)
	}
}

// activeFaults returns the faults whose window, from start to healed plus
// chaosSettle, overlaps [from, to].
func activeFaults(faults []chaosFault, from, to int64) []chaosFault {
	var out []chaosFault
	for _, f := range faults {
		if f.start <= to && f.healed+int64(chaosSettle) >= from {
			out = append(out, f)
		}
	}
	return out
}

func describeFaults(s *chaosScheduler, fs []chaosFault) string {
	if len(fs) == 0 {
		return "none"
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%s [%s–%s, healed %s]", f, s.rel(f.start), s.rel(f.end), s.rel(f.healed))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
