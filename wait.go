package holdfast

import (
	"context"
	"time"
)

// How long a reader waits. A reader that must wait for its flight holds at
// most one copy it may be answered with instead, and waits for the stage
// the flight is in until that stage's deadline, counted from when the
// reader began to wait; past it, the copy answers and the flight goes on,
// storing what it gets as usual. The stages and their copies:
//
//   - the shared-tier read (stageRead): last-known-good's copy within its
//     hard time, or past it within its stale-if-error window while the
//     tier is failing; the deadline is the slow-read delay, four times the
//     tier's recent latency and at least Policy.SlowReadGrace;
//   - the load (stageLoad: lease, limiter and loader): the value
//     stale-if-error would serve if the load failed, past its hard time;
//     the deadline is Policy.SlowLoadGrace, and no longer than the
//     slow-read delay while the shared tier is failing, when every
//     process's reads reach the source at once.
//
// Where the path is known bad the deadline is 0 and the leader answers
// with the copy itself, before any wait: the shared tier down (lookup's
// last-known-good), the key's source in backoff, the limiter full, another
// process's lease on a key this process holds current (load.go, lease.go).
// Every copy is graded against its key's invalidation watermark
// (invalidation.go): one older than another process's invalidation answers
// only a load that failed, and one older than this process's own never
// answers.

// stage is what a flight waits on, which sets its readers' deadline.
type stage uint8

const (
	stageRead stage = iota // the lookup: hot tier again, shared tier
	stageLoad              // lease, limiter, loader
)

// toLoad moves j's flight to the load stage, with the copy its readers may
// take at the stage's deadline: the one stale-if-error would serve if the
// load failed, if its watermark grades it current (a slow source is still
// answering).
func (n *Namespace) toLoad(j *job) {
	if j.refill != nil {
		return // still reading: the write-back first (refill.go)
	}
	var m *meta
	var src Source
	if n.p.SlowLoadGrace > 0 {
		m, src = n.bestStale(j.key, j.fallback, n.exactNow(), gradeCurrent)
	}
	j.f.setStage(stageLoad, m, src)
}

// wait waits for the flight's answer, or for ctx, or, when the reader holds
// a copy the flight's stage lets it take, for the stage's deadline.
func (n *Namespace) wait(ctx context.Context, key string, f *flight, collapsed bool) (Result, error) {
	w := waiting{key: key}
	defer w.stop()
	res, err, answered := n.await(ctx, f, f.firstReady(), &w)
	out := outcome{res, err}
	if !answered {
		out = f.firstOut
	}
	// A stale value handed out while its refresh runs is past its hard time
	// for a reader arriving late: that reader waits for the refresh, the one
	// synchronous load allowed past hard.
	if !answered && out.res.Stale() && n.exactNow() >= out.res.hard {
		res, err, answered = n.await(ctx, f, f.finishedReady(), &w)
		out = outcome{res, err}
		if !answered {
			out = f.finalOut
		}
	}
	if out.err != nil && answered {
		return Result{}, out.err // the reader's own context ended
	}
	out.res.Collapsed = collapsed
	return out.res, out.err
}

// waiting is one reader's wait: when it began, by the wall clock its
// timer runs on (the Cache's clock may be a fake that never moves), and the
// timer of its deadline, made only for a reader that holds a copy.
type waiting struct {
	key   string
	begun time.Time
	t     *time.Timer
}

func (w *waiting) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// await waits for ready. answered is true when the reader has its answer
// otherwise: res and err are then ctx's error, or the copy it took at its
// stage's deadline.
func (n *Namespace) await(ctx context.Context, f *flight, ready <-chan struct{}, w *waiting) (res Result, err error, answered bool) {
	select {
	case <-ready:
		return Result{}, nil, false
	default:
	}
	if w.begun.IsZero() {
		w.begun = time.Now()
	}
	for {
		st, m, src, changed := f.stageNow()
		var deadline <-chan time.Time
		if d, ok := n.deadline(st); ok {
			now := n.exactNow()
			if left := d - time.Since(w.begun); left > 0 {
				if n.copyAt(f, w.key, st, m, src, now) != nil {
					deadline = w.arm(left)
				}
			} else if res, ok := n.takeCopy(f, w.key, st, m, src, now); ok {
				return res, nil, true
			}
		}
		select {
		case <-ready:
			return Result{}, nil, false
		case <-ctx.Done():
			return Result{}, ctx.Err(), true
		case <-deadline:
		case <-changed:
		}
	}
}

// arm sets the reader's timer to fire after d.
func (w *waiting) arm(d time.Duration) <-chan time.Time {
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d)
	}
	return w.t.C
}

// deadline is how long after it began to wait a reader of a flight in
// stage st may take a copy instead, and false when it waits to the end.
func (n *Namespace) deadline(st stage) (time.Duration, bool) {
	switch {
	case st == stageRead && n.slowReadOn():
		return n.slowReadDelay(), true
	case st == stageLoad && n.p.SlowLoadGrace > 0:
		if n.slowReadOn() && n.c.shared.failing(n.exactNow()) {
			return min(n.p.SlowLoadGrace, n.slowReadDelay()), true
		}
		return n.p.SlowLoadGrace, true
	}
	return 0, false
}

// copyAt returns the copy a reader of f may take at now in stage st, given
// the flight's copy m, or nil.
func (n *Namespace) copyAt(f *flight, key string, st stage, m *meta, src Source, now int64) *meta {
	if st == stageRead {
		if f.readOver.Load() {
			return nil
		}
		return n.fromMemory(key, now)
	}
	// Before hard, stale-while-revalidate has answered already, or the
	// value is not one to serve without the load.
	if m == nil || now < m.hard || now >= n.staleUntil(m) {
		return nil
	}
	return m
}

// takeCopy answers a reader whose deadline passed with its copy, if it
// still has one.
func (n *Namespace) takeCopy(f *flight, key string, st stage, m *meta, src Source, now int64) (Result, bool) {
	m = n.copyAt(f, key, st, m, src, now)
	if m == nil {
		return Result{}, false
	}
	ev, why := evStaleOnSlowLoad, ReasonSourceSlow
	if st == stageRead {
		ev, why, src = evMemoryOnSlowRead, ReasonTierSlow, SourceMemory
	}
	n.ctr.inc(ev)
	res, _ := n.servedFor(m, src, why, now)
	return res, true
}

// fromMemory returns the last-known-good value of key that a slow shared
// read may be answered with at now, or nil: one within its hard time, or,
// while the tier is failing, one past it within its stale-if-error window.
// A copy older than the key's watermark is not current, and a cached
// not-found is never served past its time.
func (n *Namespace) fromMemory(key string, now int64) *meta {
	m := n.lkg.Get(key, now)
	switch {
	case m == nil || m.NotFound || n.grade(key, m, now) != gradeCurrent:
		return nil
	case now < m.hard:
		return m
	case now < n.staleUntil(m) && n.c.shared.failing(now):
		return m
	}
	return nil
}
