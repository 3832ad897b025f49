package redis

import "time"

// ejector decides when one Cluster node is taken out of the read and write
// paths and when it is probed back in. It is the per-node counterpart of the
// tier's breaker, with two differences: probes are PINGs sent in the
// background on a jittered exponential backoff, never real requests, and
// the decision to eject is only a wish: the node set grants it unless too
// many nodes are out already (MaxEjectedShare).
//
// It is not safe for concurrent use and never reads the clock: every method
// takes now, and jitter is a number in [0, 1) the caller draws. node wraps it
// with a mutex.
type ejector struct {
	consecutiveMax int
	rate           float64
	minRequests    int
	window         time.Duration
	base, ceiling  time.Duration

	ejected     bool
	consecutive int
	buckets     [buckets]ejBucket
	backoff     time.Duration // the wait before the next probe, before jitter
	nextProbe   time.Time
	ejections   uint64
}

const buckets = 10

type ejBucket struct {
	start              int64
	requests, failures int
}

func newEjector(c ClusterOptions) ejector {
	return ejector{
		consecutiveMax: c.ConsecutiveFailures,
		rate:           c.FailureRate,
		minRequests:    c.MinRequests,
		window:         c.Window,
		base:           c.ProbeInterval,
		ceiling:        c.MaxProbeInterval,
	}
}

// record adds a request's outcome and reports whether the node should now
// be ejected. Outcomes that arrive while the node is ejected (requests sent
// before the ejection) are ignored.
func (e *ejector) record(now time.Time, failed bool) (eject bool) {
	if e.ejected {
		return false
	}
	if failed {
		e.consecutive++
	} else {
		e.consecutive = 0
	}
	requests, failures := e.add(now, failed)
	if !failed {
		return false
	}
	return e.consecutive >= e.consecutiveMax ||
		(requests >= e.minRequests && float64(failures) >= e.rate*float64(requests))
}

// add puts one request in the rolling window and returns the window's
// totals.
func (e *ejector) add(now time.Time, failed bool) (requests, failures int) {
	width := int64(e.window / buckets)
	start := now.UnixNano() - now.UnixNano()%width
	b := &e.buckets[(start/width)%buckets]
	if b.start != start {
		*b = ejBucket{start: start}
	}
	b.requests++
	if failed {
		b.failures++
	}
	oldest := start - int64(e.window) + width
	for i := range e.buckets {
		if w := &e.buckets[i]; w.start >= oldest {
			requests += w.requests
			failures += w.failures
		}
	}
	return requests, failures
}

// quiet reports whether no failure is left in the window and none is in
// the current run.
func (e *ejector) quiet(now time.Time) bool {
	if e.consecutive != 0 {
		return false
	}
	width := int64(e.window / buckets)
	oldest := now.UnixNano() - now.UnixNano()%width - int64(e.window) + width
	for i := range e.buckets {
		if b := &e.buckets[i]; b.start >= oldest && b.failures > 0 {
			return false
		}
	}
	return true
}

// eject takes the node out; the first probe is due after ProbeInterval,
// jittered.
func (e *ejector) eject(now time.Time, jitter float64) {
	e.ejected = true
	e.ejections++
	e.backoff = e.base
	e.nextProbe = now.Add(jittered(e.backoff, jitter))
}

// refuse records that an ejection was wanted but not granted (the cap was
// reached): the run of failures starts again, so that the node asks again
// after another run rather than on every failure.
func (e *ejector) refuse() { e.consecutive = 0 }

// probeNow makes an ejected node's next probe due at now, its backoff
// started over.
func (e *ejector) probeNow(now time.Time) {
	if e.ejected {
		e.backoff = e.base
		e.nextProbe = now
	}
}

// probeDue reports whether an ejected node should be probed now.
func (e *ejector) probeDue(now time.Time) bool {
	return e.ejected && !now.Before(e.nextProbe)
}

// probed records a probe's result. A success brings the node back with a
// clean slate; a failure doubles the wait, up to MaxProbeInterval. It
// reports whether the node came back.
func (e *ejector) probed(now time.Time, ok bool, jitter float64) (back bool) {
	if !e.ejected {
		return false
	}
	if ok {
		e.ejected = false
		e.consecutive = 0
		e.buckets = [buckets]ejBucket{}
		e.backoff = 0
		return true
	}
	e.backoff = min(2*e.backoff, e.ceiling)
	e.nextProbe = now.Add(jittered(e.backoff, jitter))
	return false
}

// jittered spreads d over [d/2, d) so that many clients that ejected a node
// at the same moment do not probe it in step.
func jittered(d time.Duration, jitter float64) time.Duration {
	return d/2 + time.Duration(jitter*float64(d/2))
}
