package redis_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The chaos test's checks, run over every read once the run is over (the
// time a queued invalidation landed is only known later). The bounds are
// derived from the policy in chaos_test.go; see TestChaos's comment.

// Slack added to the bounds for what a harness cannot time exactly.
const (
	// chaosClockSlack: a read that joins a flight gets the answer the flight
	// decided on when it looked at the clock, up to one ReadBudget (50 ms)
	// earlier; and expiry decisions read a clock refreshed every
	// millisecond. A scheduling stall of the process (redistest.Stalls) is
	// added: the coarse clock stands still through it.
	chaosClockSlack = 50 * time.Millisecond
	// chaosReplicaSlack: another process may read a replica, which applies
	// the delete a little after its primary (README, the Redis tier: a
	// replica takes reads only once it has reached its primary's offset of
	// its last readiness round; what the primary took since comes over a
	// live link, in milliseconds).
	chaosReplicaSlack = 100 * time.Millisecond
	// chaosFlightSlack: a load's end is bounded by LoadTimeout through a
	// timer, which fires late on a loaded machine.
	chaosFlightSlack = 250 * time.Millisecond
	// chaosHeldSlack: an error counts as "stale was due" only when the value
	// the process held was still this far inside its window at the error.
	chaosHeldSlack = 200 * time.Millisecond
)

// Violation kinds.
const (
	vPanic            = "panic"
	vBadValue         = "bad value"
	vReadYourInval    = "read-your-invalidations"
	vStaleShared      = "stale: shared tier past the landed invalidation"
	vStaleHot         = "stale: hot tier past Hot.TTL"
	vStaleLoaded      = "stale: loaded past LoadTimeout"
	vPastSoft         = "served past soft time"
	vPastHard         = "served past hard time"
	vPastStaleIfError = "served past the stale-if-error window"
	vOriginLie        = "origin later than the value's supersession"
	vErrorOutsideDB   = "error outside database faults"
	vErrorStaleDue    = "error where a stale value was due"
)

var chaosViolationKinds = []string{vPanic, vBadValue, vReadYourInval, vStaleShared, vStaleHot, vStaleLoaded,
	vPastSoft, vPastHard, vPastStaleIfError, vOriginLie, vErrorOutsideDB, vErrorStaleDue}

// isStaleness reports whether kind is a staleness violation (the table's
// "stale violations" column).
func isStaleness(kind string) bool {
	switch kind {
	case vReadYourInval, vStaleShared, vStaleHot, vStaleLoaded, vPastSoft, vPastHard, vPastStaleIfError, vOriginLie:
		return true
	}
	return false
}

type chaosViolation struct {
	kind   string
	read   *chaosRead
	detail string
	faults []chaosFault
}

// chaosBounds is what the checks need of the configured policy.
type chaosBounds struct {
	writer       int
	ttl, sie     time.Duration
	hotTTL       time.Duration
	loadTimeout  time.Duration
	readBudget   time.Duration
	latencyLimit time.Duration
}

type chaosChecker struct {
	b      chaosBounds
	db     *chaosDB
	sched  *chaosScheduler
	faults []chaosFault
	reads  []chaosRead
	stalls *redistest.Stalls
	hot    *chaosSamples
	probes *chaosProbes
	net    map[*chaosRead]time.Duration // netLatency's memo
	// excused counts answers served past soft or hard by more than
	// chaosClockSlack but within a stall of the process.
	excused     int
	excusedMax  time.Duration
	excusedLate time.Duration
	// effLanded[key][v]: the earliest time a delete of the key that came
	// after v's supersession is known to have landed; 0: never.
	effLanded [][]int64
	viol      []chaosViolation
}

func newChaosChecker(b chaosBounds, db *chaosDB, sched *chaosScheduler, reads []chaosRead, stalls *redistest.Stalls, hot *chaosSamples) *chaosChecker {
	c := &chaosChecker{b: b, db: db, sched: sched, faults: sched.snapshot(), reads: reads, stalls: stalls, hot: hot}
	c.effLanded = make([][]int64, len(db.keys))
	for k := range db.keys {
		vs := db.keys[k].vers
		eff := make([]int64, len(vs))
		var next int64
		for v := len(vs) - 1; v >= 0; v-- {
			l := vs[v].landed
			if vs[v].superseded == 0 {
				l = 0
			}
			switch {
			case l == 0:
				eff[v] = next
			case next == 0:
				eff[v] = l
			default:
				eff[v] = min(l, next)
			}
			next = eff[v]
		}
		c.effLanded[k] = eff
	}
	return c
}

// inDBFault reports whether the read began while the database was slow or
// failing, in the settle time after, or before and ran into the fault
// having taken less than the latency limit, net of process stalls, when it
// began (a read that had taken longer was past the limit already).
func (c *chaosChecker) inDBFault(r *chaosRead) bool {
	return c.inDBFaultFor(r, chaosSettle)
}

// inDBFaultFor is inDBFault with the fault's effects lasting after past
// its heal.
func (c *chaosChecker) inDBFaultFor(r *chaosRead, after time.Duration) bool {
	for _, f := range c.faults {
		if !isDBFault(f.kind) || r.begin > f.healed+int64(after) || r.end < f.start {
			continue
		}
		if r.begin >= f.start || time.Duration(f.start-r.begin)-c.stalls.Within(r.begin, f.start) <= c.b.latencyLimit {
			return true
		}
	}
	return false
}

// chaosBackoffMax is the longest a key's load-error backoff waits under
// chaosPolicy: 30 s or the TTL, whichever is shorter (Policy.LoadErrorBackoff).
// A key whose loads failed through a database fault answers its last load's
// error, without calling the loader, until its retry is due: for up to this
// long after the fault healed.
var chaosBackoffMax = min(30*time.Second, chaosPolicy.TTL)

// inDBFaultOrBackoff is inDBFault for a database error, whose fault's
// effects last the backoff longer (chaosBackoffMax).
func (c *chaosChecker) inDBFaultOrBackoff(r *chaosRead) bool {
	return c.inDBFaultFor(r, chaosSettle+chaosBackoffMax)
}

// inWriteLoss reports whether the read began during a fault that may lose
// acknowledged writes (losesWrites), in the settle time after it, or less
// than the latency limit before it.
func (c *chaosChecker) inWriteLoss(r *chaosRead) bool {
	for _, f := range c.faults {
		if losesWrites(f) && f.start-int64(c.b.latencyLimit) <= r.begin && r.begin <= f.healed+int64(chaosSettle) {
			return true
		}
	}
	return false
}

func (c *chaosChecker) add(kind string, r *chaosRead, format string, args ...any) {
	c.viol = append(c.viol, chaosViolation{
		kind: kind, read: r, detail: fmt.Sprintf(format, args...),
		faults: activeFaults(c.faults, r.begin-int64(time.Second), r.end),
	})
}

func (c *chaosChecker) check() {
	for i := range c.reads {
		r := &c.reads[i]
		switch r.errKind {
		case chaosOK:
			c.checkValue(r)
		case chaosErrPanic:
			c.add(vPanic, r, "Get panicked: %s", r.errMsg)
		case chaosErrBadValue:
			c.add(vBadValue, r, "%s", r.errMsg)
		case chaosErrDB:
			if !c.inDBFaultOrBackoff(r) {
				c.add(vErrorOutsideDB, r, "%s: %s", r.errKind, r.errMsg)
			}
		default:
			if !c.inDBFault(r) {
				c.add(vErrorOutsideDB, r, "%s: %s", r.errKind, r.errMsg)
			}
		}
	}
	c.checkStaleDue()
}

func (c *chaosChecker) rel(ns int64) string { return c.sched.rel(ns) }

// late checks that an answer served from a read that began at r.begin
// was within limit (soft, hard, or hard + stale-if-error).
func (c *chaosChecker) late(kind string, r *chaosRead, limit int64, what string) {
	lateness := time.Duration(r.begin - limit)
	if lateness <= chaosClockSlack {
		return
	}
	stall := c.stalls.MaxGap(limit-int64(time.Millisecond), r.end)
	if lateness <= chaosClockSlack+stall {
		c.excused++
		c.excusedMax = max(c.excusedMax, stall)
		c.excusedLate = max(c.excusedLate, lateness)
		return
	}
	c.add(kind, r, "source %s, %s %s, read began %s: %v late (slack %v, longest scheduling stall then %v)",
		r.src, what, c.rel(limit), c.rel(r.begin), lateness.Round(time.Microsecond), chaosClockSlack, stall)
}

func (c *chaosChecker) checkValue(r *chaosRead) {
	b := c.b
	vs := c.db.keys[r.key].vers
	cv := vs[r.ver]

	switch r.why {
	case 0, holdfast.ReasonTierDown, holdfast.ReasonPeerLoading:
		switch {
		case r.stale:
			// Served while its refresh runs, here or in the process
			// holding the lease.
			c.late(vPastHard, r, r.hard, "hard")
		case r.src != holdfast.SourceLoaded:
			c.late(vPastSoft, r, r.soft, "soft")
		}
	case holdfast.ReasonRevalidating:
		c.late(vPastHard, r, r.hard, "hard")
	case holdfast.ReasonSourceFailed, holdfast.ReasonOverloaded, holdfast.ReasonSourceSlow, holdfast.ReasonTierSlow:
		c.late(vPastStaleIfError, r, r.hard+int64(b.sie), "hard + stale-if-error")
	}
	if cv.superseded == 0 {
		return // still the current version when the run ended
	}
	if cv.superseded < r.origin-int64(time.Millisecond) {
		c.add(vOriginLie, r, "version %d superseded at %s but served with origin %s (source %s): the loader read it before it was superseded, so its origin must be earlier",
			r.ver, c.rel(cv.superseded), c.rel(r.origin), r.src)
	}
	if cv.invReturn == 0 {
		return
	}
	inval := fmt.Sprintf("version %d superseded %s, its Invalidate %s–%s", r.ver, c.rel(cv.superseded), c.rel(cv.invStart), c.rel(cv.invReturn))
	if cv.queued {
		inval += ", queued for replay"
	}
	landed := c.effLanded[r.key][r.ver]
	if landed != 0 {
		inval += ", delete landed by " + c.rel(landed)
	} else {
		inval += ", delete never known to land"
	}
	if int(r.proc) == b.writer {
		if r.begin > cv.invReturn {
			c.add(vReadYourInval, r, "writer's process read %s, which its Invalidate had already superseded (%s; read began %v after it returned)",
				r.srcVer(c), inval, time.Duration(r.begin-cv.invReturn))
		}
		return
	}
	switch {
	case r.src == holdfast.SourceShared && r.why == 0:
		if landed != 0 && r.begin > landed+int64(chaosReplicaSlack) {
			c.add(vStaleShared, r, "read %s (%s; read began %v after the delete landed, bound %v)",
				r.srcVer(c), inval, time.Duration(r.begin-landed), chaosReplicaSlack)
		}
	case r.src == holdfast.SourceHot:
		// A hot copy is stored at the end of a load that read the source
		// before the supersession (at most LoadTimeout later), or from a
		// shared-tier read made before the delete landed; it lives Hot.TTL.
		stored := cv.superseded + int64(b.loadTimeout+chaosFlightSlack)
		if landed == 0 {
			return // bounded by the soft-time check alone
		}
		stored = max(stored, landed+int64(chaosReplicaSlack+b.readBudget+chaosFlightSlack))
		if lim := stored + int64(b.hotTTL); r.begin > lim {
			c.add(vStaleHot, r, "read %s (%s; read began %v past the bound: latest store %s + Hot.TTL %v)",
				r.srcVer(c), inval, time.Duration(r.begin-lim), c.rel(stored), b.hotTTL)
		}
	case r.src == holdfast.SourceLoaded && !r.collapsed:
		if lim := cv.superseded + int64(b.loadTimeout+chaosFlightSlack); r.begin > lim {
			c.add(vStaleLoaded, r, "read %s (%s; a load that read the source before %s ends by %s, the read began %s)",
				r.srcVer(c), inval, c.rel(cv.superseded), c.rel(lim), c.rel(r.begin))
		}
	}
}

func (r *chaosRead) srcVer(c *chaosChecker) string {
	return fmt.Sprintf("version %d from %s/%s (origin %s, soft %s, hard %s)", r.ver, r.src, r.why, c.rel(r.origin), c.rel(r.soft), c.rel(r.hard))
}

// checkStaleDue finds errors in a process that held a value within its
// stale-if-error window: every value a process was served went into its
// last-known-good store (bounded at 32 MiB, far above this test's few
// hundred keys), which the writer's own invalidations clear.
func (c *chaosChecker) checkStaleDue() {
	type pk struct {
		proc uint8
		key  uint16
	}
	by := map[pk][]int{}
	for i := range c.reads {
		r := &c.reads[i]
		by[pk{r.proc, r.key}] = append(by[pk{r.proc, r.key}], i)
	}
	sie := int64(c.b.sie)
	for k, idx := range by {
		// Successes in order of their end, errors checked against the
		// successes that ended before they began.
		succ := slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return c.reads[i].errKind != chaosOK })
		sort.Slice(succ, func(a, b int) bool { return c.reads[succ[a]].end < c.reads[succ[b]].end })
		for _, i := range idx {
			r := &c.reads[i]
			if r.errKind == chaosOK || r.errKind == chaosErrPanic || r.errKind == chaosErrBadValue {
				continue
			}
			var held *chaosRead
			for _, j := range succ {
				s := &c.reads[j]
				if s.end >= r.begin {
					break
				}
				if int(k.proc) == c.b.writer {
					vs := c.db.keys[s.key].vers
					// The writer's Invalidate drops its local copies, and
					// a flight under way when it ran stores nothing (even
					// a value it read after the source changed): only a
					// read that began after the previous invalidation had
					// returned, of a version not superseded since, left a
					// value behind.
					if inv := vs[s.ver].invStart; inv != 0 && inv < r.end {
						continue
					}
					if s.ver > 0 && (vs[s.ver-1].invReturn == 0 || s.begin <= vs[s.ver-1].invReturn) {
						continue
					}
				}
				if held == nil || s.hard > held.hard {
					held = s
				}
			}
			if held != nil && held.hard+sie > r.end+int64(chaosHeldSlack) {
				sup := "still current"
				if cv := c.db.keys[held.key].vers[held.ver]; cv.superseded != 0 && cv.superseded < r.end {
					sup = "superseded and invalidated at " + c.rel(cv.superseded)
				}
				c.add(vErrorStaleDue, r, "%s: %s; the process held %s (%s), read %s, servable until %s",
					r.errKind, r.errMsg, held.srcVer(c), sup, c.rel(held.end), c.rel(held.hard+sie))
			}
		}
	}
}

// describe is a violation's failure message: the invariant, the key, the
// versions, the process, the times and the faults active.
func (c *chaosChecker) describe(v chaosViolation) string {
	r := v.read
	role := "reader"
	if int(r.proc) == c.b.writer {
		role = "writer's process"
	}
	key := chaosKeyName(int(r.key))
	if c.probes != nil {
		if pr := c.probes.result(r); pr != "" {
			v.detail += "; " + pr
		}
	}
	return fmt.Sprintf("%s: key %s (%s in that process then), process %d (%s), read %s–%s (%v): %s; faults active: %s",
		v.kind, key, c.hot.hotAt(int(r.proc), key, r.begin), r.proc, role, c.rel(r.begin), c.rel(r.end),
		time.Duration(r.end-r.begin).Round(time.Microsecond), v.detail, describeFaults(c.sched, v.faults))
}

// history lists the answers the process got for r's key in the window
// before r began, runs of the same answer collapsed: which path brought a
// copy into the hot tier, say, is in the read that preceded its hits.
func (c *chaosChecker) history(r *chaosRead, window time.Duration) string {
	var rs []*chaosRead
	for i := range c.reads {
		o := &c.reads[i]
		if o.proc == r.proc && o.key == r.key && o.begin <= r.begin && o.begin >= r.begin-int64(window) {
			rs = append(rs, o)
		}
	}
	sort.Slice(rs, func(a, b int) bool { return rs[a].begin < rs[b].begin })
	var b strings.Builder
	for i := 0; i < len(rs); {
		o := rs[i]
		j := i + 1
		for j < len(rs) && rs[j].src == o.src && rs[j].why == o.why && rs[j].ver == o.ver && rs[j].errKind == o.errKind {
			j++
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		if o.errKind != chaosOK {
			fmt.Fprintf(&b, "%s %s", c.rel(o.begin), o.errKind)
		} else {
			fmt.Fprintf(&b, "%s v%d %s/%s (origin %s)", c.rel(o.begin), o.ver, o.src, o.why, c.rel(o.origin))
		}
		if j-i > 1 {
			fmt.Fprintf(&b, " ×%d to %s", j-i, c.rel(rs[j-1].begin))
		}
		i = j
	}
	return fmt.Sprintf("the process's reads of the key in the %v before: %s; its invalidation stream then: %s",
		window, b.String(), c.hot.streamBetween(c.sched, int(r.proc), r.begin-int64(window), r.begin))
}
