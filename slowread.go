package holdfast

import (
	"sync/atomic"
	"time"
)

// Answering from memory while the shared tier is slow. A read of the
// shared tier normally costs a round trip; a frozen server (SIGSTOP, a
// stalled VM, a full network buffer) costs the tier's whole read budget,
// for every read, until the breaker opens, and again for each half-open
// probe. When this process's last-known-good store holds a value it may
// serve, the reader waits only for the slow-read delay, an adaptive bound
// derived from the tier's recent latency, and then gets that value while
// the read goes on: its answer still reaches the breaker and the stores.

const (
	// slowReadFactor times the shared tier's recent latency is the
	// slow-read delay, when that is longer than Policy.SlowReadGrace: a
	// read four times slower than usual is not jitter.
	slowReadFactor = 4
	// passOverFactor times the slow-read delay is how long the shared
	// tier may answer nothing, with reads waiting on it, before a read
	// with nothing in memory to serve skips it (see passOver).
	passOverFactor = 4
	// tierFailingFor is how long after its last error or bypass the
	// shared tier counts as failing: while it does, a value past its hard
	// time but within its stale-if-error window may answer a slow read.
	tierFailingFor = time.Second
)

// sharedHealth is what the read path knows of the shared tier's latency and
// failures, shared by the Cache's namespaces (the tier is the Cache's).
type sharedHealth struct {
	// latency is a moving average, in nanoseconds, of the single-key
	// reads that succeeded (a hit or a miss), each weighing 1/8: a burst
	// of slow answers moves it within a few reads, one outlier does not
	// double it. 0 until the first read.
	latency atomic.Int64
	// failedAt is when the tier last failed or bypassed a call, in Unix
	// nanoseconds; 0 never.
	failedAt atomic.Int64
	// inflight counts the shared reads running; busySince is when it last
	// rose from 0, lastDone when a read last ended: together they tell a
	// tier that has answered nothing for a while with reads waiting on it.
	inflight  atomic.Int64
	busySince atomic.Int64
	lastDone  atomic.Int64
}

// readBegins records the start of a shared read at now.
func (h *sharedHealth) readBegins(now int64) {
	if h.inflight.Add(1) == 1 {
		h.busySince.Store(now)
	}
}

// readEnds records the end of a shared read begun at began, at now, that
// the tier answered (ok) or failed.
func (h *sharedHealth) readEnds(began, now int64, ok bool) {
	h.inflight.Add(-1)
	h.lastDone.Store(now)
	if ok {
		h.observeRead(now - began)
	}
}

// suspect reports whether the shared tier may be stalled or failing at now,
// so that a read had better not run on its reader's goroutine: it failed
// within tierFailingFor, or reads are waiting on it and it has answered
// none for delay. Running every read on a goroutine of its own halves the
// shared-hit throughput of a healthy tier (BenchmarkGetSharedHitRatio), and
// so does running them so while a busy tier answers slowly but steadily; a
// freeze is seen after at most delay, and the few reads sent before that
// wait for the tier as before (a reader that joins one of them does not).
func (h *sharedHealth) suspect(now int64, delay time.Duration) bool {
	return h.failing(now) || h.stalled(now, delay)
}

// stalled reports whether reads are waiting on the shared tier at now and
// it has answered none of them for d.
func (h *sharedHealth) stalled(now int64, d time.Duration) bool {
	return h.inflight.Load() > 0 && now-max(h.lastDone.Load(), h.busySince.Load()) > int64(d)
}

// observeRead adds a successful read that took d nanoseconds.
func (h *sharedHealth) observeRead(d int64) {
	if d <= 0 {
		return // a fake clock that did not move
	}
	old := h.latency.Load()
	avg := d
	if old != 0 {
		avg = old + (d-old)/8
	}
	if avg != old {
		h.latency.Store(avg) // a lost update between racing readers is harmless
	}
}

// failing reports whether the tier failed within tierFailingFor of now.
func (h *sharedHealth) failing(now int64) bool {
	at := h.failedAt.Load()
	return at != 0 && now-at < int64(tierFailingFor)
}

// slowReadOn reports whether a slow shared read may be answered from
// memory in this namespace.
func (n *Namespace) slowReadOn() bool {
	return n.p.SlowReadGrace > 0 && n.c.opts.Shared != nil && n.lkg != nil
}

// slowReadDelay is how long a reader holding a value it may serve waits for
// the shared tier: slowReadFactor times its recent latency, at least
// Policy.SlowReadGrace. The tier's read budget ends the read sooner when
// it is shorter.
func (n *Namespace) slowReadDelay() time.Duration {
	return max(time.Duration(slowReadFactor*n.c.shared.latency.Load()), n.p.SlowReadGrace)
}

// passOver reports whether a read of key at now skips the shared tier: the
// tier has answered none of the reads waiting on it for passOverFactor
// times the slow-read delay (a freeze, a cut network), and this process
// holds no value the read could be answered with from memory. Such a read
// would otherwise wait the tier's whole read budget, as each read does
// until the tier's breaker opens, which no tier's can before a read has
// waited its budget out (a standalone Redis's, not before two PINGs more);
// it goes to the loader at once instead, as if the breaker had bypassed
// it, while the reads already sent wait their budget out and tell the
// breaker. A tier that answers, however slowly, is read as before.
func (n *Namespace) passOver(key string, now int64) bool {
	return n.p.SlowReadGrace > 0 &&
		n.c.shared.stalled(now, passOverFactor*n.slowReadDelay()) &&
		(n.lkg == nil || n.fromMemory(key, now) == nil)
}
