package redis_test

import (
	"bytes"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The chaos test's table and its goroutine accounting.

type chaosReport struct {
	seed             uint64
	total            time.Duration // HOLDFAST_CHAOS
	wall             time.Duration // first read to last
	phase2           int64         // Unix ns phase 2 began
	chk              *chaosChecker
	writes           chaosWriteStats
	samples          *chaosSamples
	final            []chaosProcStats
	db               *chaosDB
	goroutinesBefore int
	leaked           int
}

type chaosRow struct {
	name                       string
	includes                   func(r *chaosRead) bool
	reads, errors, stale, sdue int
	lat                        []time.Duration
	p50, p99, maxLat, maxNet   time.Duration
}

func chaosMs(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}

func quantileOf(s []time.Duration, q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// rows builds the latency table's rows: by what was going on when the read
// ran.
func (rep *chaosReport) rows() []*chaosRow {
	chk := rep.chk
	overlaps := func(kind string) func(r *chaosRead) bool {
		return func(r *chaosRead) bool {
			for _, f := range chk.faults {
				if f.kind == kind && f.start <= r.end && f.healed+int64(chaosSettle) >= r.begin {
					return true
				}
			}
			return false
		}
	}
	rows := []*chaosRow{
		{name: "no fault (nor its 1 s settle)", includes: func(r *chaosRead) bool {
			return len(activeFaults(chk.faults, r.begin, r.end)) == 0
		}},
	}
	seen := map[string]bool{}
	for _, f := range chk.faults {
		seen[f.kind] = true
	}
	for _, k := range chaosFaultKinds {
		if seen[k] {
			rows = append(rows, &chaosRow{name: "during " + k, includes: overlaps(k)})
		}
	}
	rows = append(rows,
		&chaosRow{name: "phase 1 (node and database faults)", includes: func(r *chaosRead) bool { return r.begin < rep.phase2 }},
		&chaosRow{name: "phase 2 (topology changes)", includes: func(r *chaosRead) bool { return r.begin >= rep.phase2 }},
		&chaosRow{name: "**outside database faults**", includes: func(r *chaosRead) bool { return !chk.inDBFault(r) }},
		&chaosRow{name: "in database faults (+1 s settle)", includes: chk.inDBFault},
		&chaosRow{name: "where Redis may lose writes (+1 s settle)", includes: func(r *chaosRead) bool { return !chk.inDBFault(r) && chk.inWriteLoss(r) }},
		&chaosRow{name: "all reads", includes: func(*chaosRead) bool { return true }},
	)
	vByRead := map[*chaosRead][]string{}
	for _, v := range chk.viol {
		vByRead[v.read] = append(vByRead[v.read], v.kind)
	}
	for _, row := range rows {
		for i := range chk.reads {
			r := &chk.reads[i]
			if !row.includes(r) {
				continue
			}
			row.reads++
			if r.errKind != chaosOK {
				row.errors++
			}
			for _, k := range vByRead[r] {
				switch {
				case k == vErrorStaleDue:
					row.sdue++
				case isStaleness(k):
					row.stale++
				}
			}
			row.lat = append(row.lat, time.Duration(r.end-r.begin))
			row.maxNet = max(row.maxNet, chk.netLatency(r))
		}
		slices.Sort(row.lat)
		row.p50, row.p99 = quantileOf(row.lat, 0.5), quantileOf(row.lat, 0.99)
		if len(row.lat) > 0 {
			row.maxLat = row.lat[len(row.lat)-1]
		}
		row.lat = nil
	}
	return rows
}

// netLatency is a read's latency less the time the whole process was not
// scheduled meanwhile (redistest.Stalls): on 2 shared cores, with the race
// detector, seven redis-servers and redis-cli moving slots, the Go
// scheduler can leave every goroutine waiting for a few hundred
// milliseconds, which no code in the read path can help.
func (c *chaosChecker) netLatency(r *chaosRead) time.Duration {
	if c.net == nil {
		c.net = make(map[*chaosRead]time.Duration)
	}
	d, ok := c.net[r]
	if !ok {
		d = time.Duration(r.end-r.begin) - c.stalls.Within(r.begin, r.end)
		c.net[r] = d
	}
	return d
}

// slowOutside returns the n reads outside the database faults with the
// longest latency net of stalls, longest first.
func (rep *chaosReport) slowOutside(n int) []*chaosRead {
	return rep.slowest(n, func(r *chaosRead) bool { return !rep.chk.inDBFault(r) && !rep.chk.inWriteLoss(r) })
}

// slowInWriteLoss is the n slowest reads outside the database faults that
// began in a fault that may lose acknowledged writes (inWriteLoss).
func (rep *chaosReport) slowInWriteLoss(n int) []*chaosRead {
	return rep.slowest(n, func(r *chaosRead) bool { return !rep.chk.inDBFault(r) && rep.chk.inWriteLoss(r) })
}

// slowest is the n slowest reads, net of process stalls, that pass keep.
func (rep *chaosReport) slowest(n int, keep func(*chaosRead) bool) []*chaosRead {
	var out []*chaosRead
	for i := range rep.chk.reads {
		r := &rep.chk.reads[i]
		if keep(r) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(a, b int) bool { return rep.chk.netLatency(out[a]) > rep.chk.netLatency(out[b]) })
	return out[:min(n, len(out))]
}

func (c *chaosChecker) describeRead(r *chaosRead) string {
	what := r.errKind.String()
	if r.errKind == chaosOK {
		what = r.srcVer(c)
	} else {
		what += ": " + r.errMsg
	}
	return fmt.Sprintf("key %s, process %d, %v (%v net of process stalls), began %s: %s; faults active: %s",
		chaosKeyName(int(r.key)), r.proc, time.Duration(r.end-r.begin).Round(time.Microsecond),
		c.netLatency(r).Round(time.Microsecond), c.rel(r.begin), what,
		describeFaults(c.sched, activeFaults(c.faults, r.begin-int64(time.Second), r.end)))
}

func (rep *chaosReport) table() string {
	var b strings.Builder
	chk := rep.chk
	fmt.Fprintf(&b, "TestChaos: seed %d, HOLDFAST_CHAOS=%v, %.1f s of traffic, %d processes × %d reads/s over %d keys, %d invalidations/s, GOMAXPROCS %d, race %v\n\n",
		rep.seed, rep.total, rep.wall.Seconds(), chaosProcs, chaosRate, chaosKeys, chaosInvalidRate, runtime.GOMAXPROCS(0), raceEnabled)

	b.WriteString("| reads | reads | errors | stale violations | errors where stale was due | p50 ms | p99 ms | max ms | max ms net of stalls |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rep.rows() {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s | %s | %s |\n", r.name, r.reads, r.errors, r.stale, r.sdue,
			chaosMs(r.p50), chaosMs(r.p99), chaosMs(r.maxLat), chaosMs(r.maxNet))
	}

	b.WriteString("\n| invariant | violations |\n|---|---:|\n")
	byKind := map[string]int{}
	for _, v := range chk.viol {
		byKind[v.kind]++
	}
	for _, k := range chaosViolationKinds {
		fmt.Fprintf(&b, "| %s | %d |\n", k, byKind[k])
	}
	lat := "ok"
	if s := rep.slowOutside(1); len(s) > 0 && chk.netLatency(s[0]) > chaosLatencyMax {
		lat = fmt.Sprintf("%v > %v", chk.netLatency(s[0]).Round(time.Millisecond), chaosLatencyMax)
	}
	fmt.Fprintf(&b, "| max latency outside database faults and writes lost, net of process stalls, ≤ %v | %s |\n", chaosLatencyMax, lat)
	lat = "ok"
	if s := rep.slowInWriteLoss(1); len(s) > 0 && chk.netLatency(s[0]) > chaosLeaseBound {
		lat = fmt.Sprintf("%v > %v", chk.netLatency(s[0]).Round(time.Millisecond), chaosLeaseBound)
	}
	fmt.Fprintf(&b, "| max latency where Redis may lose writes (primary killed, takeover), net of process stalls, ≤ Lease.TTL + LoadTimeout = %v | %s |\n", chaosLeaseBound, lat)
	fmt.Fprintf(&b, "| goroutines left after Close (%d before) | %d |\n", rep.goroutinesBefore, rep.leaked)
	fmt.Fprintf(&b, "| (not failing) served past soft/hard by more than %v, within a stall of the process | %d (latest %v, stall up to %v) |\n",
		chaosClockSlack, chk.excused, chk.excusedLate.Round(time.Millisecond), chk.excusedMax.Round(time.Millisecond))

	// Faults.
	b.WriteString("\n| fault | injected | harness errors |\n|---|---:|---:|\n")
	nf, ne := map[string]int{}, map[string]int{}
	for _, f := range chk.faults {
		nf[f.kind]++
		if f.err != "" {
			ne[f.kind]++
		}
	}
	for _, k := range chaosFaultKinds {
		if nf[k] > 0 {
			fmt.Fprintf(&b, "| %s | %d | %d |\n", k, nf[k], ne[k])
		}
	}

	// Counters.
	var opens []string
	var sumOpens uint64
	var reads, hot, loads, loadErrs, smR, smW, leaseT, leaseW, leaseG, stale, soe, local, backoff, dropped, coalesced uint64
	for _, f := range rep.final {
		opens = append(opens, fmt.Sprint(f.tier.BreakerOpens))
		sumOpens += f.tier.BreakerOpens
		s := f.ns
		reads += s.Get("reads")
		hot += s.Get("hot.hits")
		loads += s.Get("loads")
		loadErrs += s.Get("load.errors")
		smR += s.Get("smeared.reads")
		smW += s.Get("smeared.writes")
		leaseT += s.Get("leases.taken")
		leaseW += s.Get("lease.waits")
		leaseG += s.Get("lease.gave_up")
		stale += s.Get("stale_served")
		soe += s.Get("stale_on_error")
		local += s.Get("local_served")
		backoff += s.Get("error_backoffs")
		dropped += s.Get("dropped_stale_sets")
		coalesced += s.Get("coalesced")
	}
	hotShare := 0.0
	if reads > 0 {
		hotShare = float64(hot) / float64(reads)
	}
	var maxHot []string
	for _, h := range rep.samples.maxHot {
		maxHot = append(maxHot, fmt.Sprint(h))
	}
	var dbLoads, dbFails int64
	for i := range rep.db.loads {
		dbLoads += rep.db.loads[i].Load()
		dbFails += rep.db.fails[i].Load()
	}
	b.WriteString("\n| counter | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| breaker openings (per process) | %d (%s) |\n", sumOpens, strings.Join(opens, ", "))
	for _, o := range rep.samples.openedAt {
		fmt.Fprintf(&b, "| breaker opened in process %d by %s | faults active: %s |\n", o[0], chk.rel(o[1]),
			strings.ReplaceAll(describeFaults(chk.sched, activeFaults(chk.faults, o[1]-int64(300*time.Millisecond), o[1])), "|", "/"))
	}
	nStalls, longest := chk.stalls.Gaps()
	fmt.Fprintf(&b, "| process stalls over %v / longest | %d / %s ms |\n", redistest.StallMin, nStalls, chaosMs(longest))
	fmt.Fprintf(&b, "| node ejections (all processes) | %d |\n", rep.samples.totalEjections())
	fmt.Fprintf(&b, "| loader calls / failed | %d / %d |\n", dbLoads, dbFails)
	fmt.Fprintf(&b, "| invalidations / queued for replay / errors; max Invalidate latency | %d / %d / %d; %s ms |\n",
		rep.writes.invalidations, rep.writes.queued, rep.writes.errors, chaosMs(rep.writes.maxLatency))
	fmt.Fprintf(&b, "| hot-tier share of reads; hot keys (max, per process) | %.1f%%; %s |\n", 100*hotShare, strings.Join(maxHot, ", "))
	fmt.Fprintf(&b, "| smeared reads / writes | %d / %d |\n", smR, smW)
	fmt.Fprintf(&b, "| leases taken / waits / gave up | %d / %d / %d |\n", leaseT, leaseW, leaseG)
	fmt.Fprintf(&b, "| coalesced reads | %d |\n", coalesced)
	fmt.Fprintf(&b, "| served stale / stale-on-error / last-known-good / error backoff | %d / %d / %d / %d |\n", stale, soe, local, backoff)
	fmt.Fprintf(&b, "| loads not stored (invalidated meanwhile) | %d |\n", dropped)

	// Error kinds, with one message each.
	errs := map[string]int{}
	sample := map[string]string{}
	for i := range chk.reads {
		r := &chk.reads[i]
		if r.errKind == chaosOK {
			continue
		}
		k := r.errKind.String()
		errs[k]++
		if _, ok := sample[k]; !ok {
			sample[k] = r.errMsg
		}
	}
	if len(errs) > 0 {
		b.WriteString("\n| read error | count | example |\n|---|---:|---|\n")
		for _, k := range slices.Sorted(maps.Keys(errs)) {
			msg := sample[k]
			if len(msg) > 160 {
				msg = msg[:160] + "…"
			}
			fmt.Fprintf(&b, "| %s | %d | %s |\n", k, errs[k], strings.ReplaceAll(msg, "|", "/"))
		}
	}
	return b.String()
}

// goroutineStacks returns the stacks of every goroutine.
func goroutineStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitGoroutines waits up to d for the goroutine count to come back to
// before, and returns by how much it is still above.
func waitGoroutines(before int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return 0
		}
		if time.Now().After(deadline) {
			return n - before
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// diffGoroutines lists the goroutines of after that before has fewer of,
// grouped by where they were created and where they are now, with one
// stack each.
func diffGoroutines(before, after []byte) string {
	group := func(dump []byte) (map[string]int, map[string]string) {
		counts, stacks := map[string]int{}, map[string]string{}
		for _, g := range bytes.Split(dump, []byte("\n\n")) {
			lines := strings.Split(strings.TrimSpace(string(g)), "\n")
			if len(lines) < 2 {
				continue
			}
			top := lines[1]
			created := ""
			for _, l := range lines {
				if strings.HasPrefix(l, "created by ") {
					created = l
				}
			}
			if i := strings.LastIndex(top, "("); i > 0 {
				top = top[:i]
			}
			key := top + " / " + created
			counts[key]++
			stacks[key] = string(g)
		}
		return counts, stacks
	}
	b, _ := group(before)
	a, stacks := group(after)
	var out strings.Builder
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if a[k] > b[k] {
			fmt.Fprintf(&out, "+%d %s\n%s\n\n", a[k]-b[k], k, stacks[k])
		}
	}
	return out.String()
}
