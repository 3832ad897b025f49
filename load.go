package holdfast

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// load is the stage for jobs whose lookup found no usable value: each key's
// version and lease (concurrently when there are many), then one loader
// call for the keys still without an answer, and the stores. ctx has the
// first reader's values but not its cancellation (the load is every
// reader's); waits and the loader's own context end at Close.
//
// Keys whose lease another process holds wait for its value while the
// other keys load: a batch never holds a lease while it waits for one, or
// two processes whose batches share keys could each wait for the other.
func (n *Namespace) load(ctx context.Context, js []*job, src source) {
	if js = n.refill(js); len(js) == 0 {
		return
	}
	if len(js) == 1 {
		n.prepare(ctx, js[0])
	} else {
		each(js, func(j *job) { n.prepare(ctx, j) })
	}
	var held []*job
	for _, j := range js {
		if j.waiting {
			held = append(held, j)
		}
	}
	if len(held) == 0 {
		n.loadNow(ctx, js, src)
		return
	}
	ready := make([]*job, 0, len(js)-len(held))
	for _, j := range js {
		if !j.waiting {
			ready = append(ready, j)
		}
	}
	var waits sync.WaitGroup
	waits.Go(func() { each(held, func(j *job) { n.waitLease(ctx, j) }) })
	n.loadNow(ctx, ready, src)
	waits.Wait()
	n.loadNow(ctx, held, src)
}

// prepare reads j's version, before the source is read, unless the lookup
// read it with the key's value, and takes its lease or finds another
// process holding it.
func (n *Namespace) prepare(ctx context.Context, j *job) {
	if !j.verRead {
		j.ver = n.readVersion(ctx, j.key, j.status)
	}
	if n.p.Lease.Enabled && n.coord != nil && j.status == tierMiss && !j.f.published {
		j.waiting = n.takeLease(ctx, j)
	}
}

// loadNow loads the jobs not done yet: the load-error backoff, the
// limiter, one loader call, the stores; then it releases their leases.
func (n *Namespace) loadNow(ctx context.Context, js []*job, src source) {
	defer func() {
		for _, j := range js {
			if j.lease != nil {
				n.releaseLease(j.lease)
			}
		}
	}()
	toLoad := js // until a job turns out to need no load
	filtered := false
	refresh := true
	for i, j := range js {
		if j.done || n.servedInBackoff(j) {
			if !filtered {
				toLoad, filtered = append(make([]*job, 0, len(js)), js[:i]...), true
			}
			continue
		}
		if filtered {
			toLoad = append(toLoad, j)
		}
		refresh = refresh && (j.f.published || j.refreshOf != 0)
	}
	if len(toLoad) == 0 {
		return
	}
	mode := admitWait
	switch {
	case refresh:
		mode = admitRefresh
	case n.allCanBeServedStale(toLoad):
		mode = admitNow
	}
	lst := n.startStage(ctx, traceLimiter)
	release := n.acquire(ctx, mode)
	if lst != nil {
		lst.End(stageResult{Outcome: either(release != nil, "admitted", "rejected")})
	}
	if release == nil {
		// A refresh's readers were answered already: counted apart, so
		// that Rejected counts only loads that readers waited for.
		ev := evRejected
		if mode == admitRefresh {
			ev = evRefreshRejected
		}
		n.ctr.add(ev, uint64(len(toLoad)))
		for _, j := range toLoad {
			res, err := n.failed(j.f, j.key, j.fallback, &loadError{n.name, j.key, ErrOverloaded})
			j.out, j.done = outcome{res, err}, true
		}
		return
	}
	keys := make([]string, len(toLoad))
	for i, j := range toLoad {
		keys[i] = j.key
	}
	n.ctr.inc(evLoad)
	n.ctr.add(evKeysLoaded, uint64(len(toLoad)))
	// ctx has the first reader's values but no cancellation; Close cancels
	// the loader's context too.
	lctx, cancel := context.WithTimeout(ctx, n.p.LoadTimeout)
	defer cancel()
	defer context.AfterFunc(n.c.ctx, cancel)()
	lts := &lifetimes{keys: keys}
	lctx = context.WithValue(lctx, lifetimesKey{}, lts)
	start := n.c.clock.Now()
	st := n.startStage(lctx, traceLoad)
	ans, err := callBounded(n.c, lctx, func(ctx context.Context) (keysAnswer, error) { return src.load(ctx, keys) }, release)
	lo := n.loadOutcome(lctx, start, err)
	if lo.err != nil && !isNotFound(lo.err) {
		n.ctr.inc(evLoadError)
		if errors.Is(lo.err, context.DeadlineExceeded) {
			n.ctr.inc(evLoadTimeout)
		}
	}
	if st != nil {
		st.End(stageResult{Outcome: loadOutcomeName(lo.err), Err: lo.err})
	}
	var writes []tier.Item
	var vers []version
	var writers []*flight
	for i, j := range toLoad {
		klo := lo
		klo.ver = j.ver
		if lt, ok := lts.lifetimeOf(j.key); ok {
			klo.lifetime = &lt
		}
		if err == nil {
			klo.val = ans.vals[i]
			if ans.errs != nil {
				klo.err = ans.errs[i]
			}
		}
		var w *tier.Item
		j.out, w = n.loaded(j.f, j.key, klo, j.fallback)
		j.done = true
		if w != nil {
			writes = append(writes, *w)
			vers = append(vers, j.ver)
			writers = append(writers, j.f)
		}
	}
	// One write for the batch; each flight's store lock is held until it
	// is done, so an invalidation cannot slip in between.
	if len(writes) > 0 {
		n.writeShared(ctx, writes, vers)
	}
	for _, f := range writers {
		f.endStore()
	}
}

// loadResult is one key's answer from a loader call.
type loadResult struct {
	val   []byte
	err   error
	start time.Time     // when the call began: the value's origin
	cost  time.Duration // how long it took
	ver   version       // the key's version read before the call
	// lifetime is what the loader set for the key (SetLifetime), or nil.
	lifetime *Lifetime
}

// loadOutcome is what a loader call left: its error (a LoadTimeout that
// passed named as such), when it began and how long it took, observed.
func (n *Namespace) loadOutcome(ctx context.Context, start time.Time, err error) loadResult {
	if err != nil && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		err = loadTimedOut(n.p.LoadTimeout)
	}
	cost := n.c.clock.Now().Sub(start)
	n.observe(cost, err)
	return loadResult{err: err, start: start, cost: cost}
}

// loaded stores what the loader returned in this process's tiers and
// answers the flight's readers with it. When the value must also go to the
// shared tier, write is the item to write and the flight's store lock is
// held: the caller writes it (alone, or batched with others) and then calls
// f.endStore. Readers do not wait for that write, which may be slow or
// failing (a Redis failure during the put must neither fail the
// read nor run the loader again).
func (n *Namespace) loaded(f *flight, key string, lo loadResult, fallback *meta) (out outcome, write *tier.Item) {
	val, err, start, cost := lo.val, lo.err, lo.start, lo.cost
	var m meta
	if err == nil || isNotFound(err) {
		n.forgetLoadFailure(key)
	}
	switch {
	case err == nil:
		if len(val) > n.p.MaxValueBytes {
			// Served to this flight's readers, never cached.
			n.ctr.inc(evTooLarge)
			t := start.UnixNano()
			return outcome{Result{Value: val, Source: SourceLoaded, origin: t, soft: t, hard: t}, nil}, nil
		}
		m = n.newEntry(val, start.UnixNano(), cost, false, lo.lifetime)
		if lo.ver.known {
			m.ver = uint32(lo.ver.v + 1)
		}
	case isNotFound(err):
		n.ctr.inc(evLoadNotFound)
		if n.p.NegativeTTL < 0 {
			n.forget(key)
			t := start.UnixNano()
			return outcome{Result{Source: SourceLoaded, NotFound: true, origin: t, soft: t, hard: t}, ErrNotFound}, nil
		}
		m = n.newEntry(nil, start.UnixNano(), cost, true, nil)
	default:
		n.loadFailed(key, err)
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			n.c.logger().Error("holdfast: loader panicked", "namespace", n.name, "key", key, "panic", pe.Value, "stack", string(pe.Stack))
		}
		res, err := n.failed(f, key, fallback, &loadError{n.name, key, err})
		return outcome{res, err}, nil
	}
	res, rerr := n.served(&m, SourceLoaded)
	out = outcome{res, rerr}
	if !f.beginStore() {
		n.keepAsFallback(key, &m)
		f.endStore()
		n.ctr.inc(evDroppedStaleSet)
		f.publish(res, rerr)
		return out, nil
	}
	now := n.exactNow()
	n.putLocal(key, &m, now)
	f.publish(res, rerr)
	if n.c.opts.Shared == nil {
		f.endStore()
		return out, nil
	}
	ttl := time.Duration(m.hard - now)
	if !m.NotFound {
		// Kept past hard so that the tier itself can serve stale values
		// when the loader fails while Redis is up.
		ttl = time.Duration(n.staleUntil(&m) - now)
	}
	if ttl <= 0 {
		f.endStore()
		return out, nil
	}
	return out, &tier.Item{Key: n.prefix + key, Value: m.raw, TTL: ttl}
}

// forget drops this process's copies of key, which the source no longer
// has, when negative caching is off: stale-if-error must not bring back a
// value the source just said is gone.
func (n *Namespace) forget(key string) {
	if n.hot != nil {
		n.hot.Delete(key)
	}
	if n.lkg != nil {
		n.lkg.Delete(key)
	}
}

// writeShared writes items to the shared tier; a failure is counted, never
// returned: a write never fails a read. With a tier.Coordinator each item is
// written only if its key's version is still the one read before the load;
// an item whose version could not be read is not written at all, since it
// might overwrite an invalidation.
//
// The write gets a LoadTimeout of its own, whatever the load took, on top
// of the tier's own bound (the Redis tier's WriteTimeout).
func (n *Namespace) writeShared(fctx context.Context, items []tier.Item, vers []version) {
	st := n.startStage(fctx, traceSharedWrite)
	var failed error
	defer func() {
		if st != nil {
			st.End(stageResult{Outcome: either(failed == nil, "ok", "error"), Err: failed})
		}
	}()
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	if n.coord == nil {
		if err := n.c.opts.Shared.Set(ctx, items...); err != nil {
			failed = err
			for range items {
				n.countTierError(err, evSharedSetError)
			}
		}
		return
	}
	for i, it := range items {
		if !vers[i].known {
			continue
		}
		var stored bool
		var err error
		if n.smearing(it.Key[len(n.prefix):]) {
			n.ctr.inc(evSmearedWrite)
			stored, err = n.smear.SetSmearedIfVersion(ctx, it, vers[i].v)
		} else {
			stored, err = n.coord.SetIfVersion(ctx, it, vers[i].v)
		}
		switch {
		case err != nil:
			failed = err
			n.countTierError(err, evSharedSetError)
		case !stored:
			n.ctr.inc(evDroppedStaleSet)
		}
	}
}

// version is a key's invalidation version as read before a load.
type version struct {
	v     uint64
	known bool
}

// readVersion reads key's version before the source is read, when the
// shared tier is a tier.Coordinator that answered the read just made.
func (n *Namespace) readVersion(ctx context.Context, key string, status tierStatus) version {
	if n.coord == nil || status == tierDown {
		return version{}
	}
	v, err := n.coord.Version(ctx, n.prefix+key)
	if err != nil {
		n.countTierError(err, evSharedError)
		return version{}
	}
	return version{v, true}
}

// failed answers a read whose load failed or was rejected: with the newest
// stale value still allowed, err as its LoadErr, else with err.
//
// The time is read afresh: a load may have run for up to its timeout, and
// its readers' hard times may have passed meanwhile.
func (n *Namespace) failed(f *flight, key string, fallback *meta, err error) (Result, error) {
	overloaded := errors.Is(err, ErrOverloaded)
	why := ReasonSourceFailed
	if overloaded {
		why = ReasonOverloaded
	}
	if res, ok := n.stale(f, key, fallback, why); ok {
		res.LoadErr = err
		return res, nil
	}
	if overloaded {
		n.ctr.inc(evOverloaded)
	}
	return Result{}, err
}

// stale returns, given for why, the newest value still allowed when fresh
// data cannot be had: the shared tier's fallback or last-known-good, within
// its hard time or its stale-if-error window.
func (n *Namespace) stale(f *flight, key string, fallback *meta, why Reason) (Result, bool) {
	now := n.exactNow()
	best, src := n.bestStale(key, fallback, now, gradeFallback)
	if best == nil {
		return Result{}, false
	}
	if now < best.hard {
		// A rejected or failed refresh keeps the value until its hard
		// time, as stale-while-revalidate would have: counted as such,
		// unless the flight has served it so already.
		if !f.published {
			n.ctr.inc(evStaleServed)
		}
	} else {
		n.ctr.inc(evStaleOnError)
	}
	res, _ := n.servedFor(best, src, why, now)
	// Served because fresh data could not be had, the value is stale
	// even within its soft time: a copy another process's invalidation
	// left a fallback, say.
	res.pastSoft = true
	return res, true
}

// bestStale is the newest value of key still allowed at now when fresh
// data cannot be had, and where it is: the shared tier's fallback
// (SourceShared) or last-known-good (SourceMemory), within its
// stale-if-error window and graded at least worst by its watermark; nil if
// none. (The other copy is older, and graded no better.)
func (n *Namespace) bestStale(key string, fallback *meta, now int64, worst grade) (*meta, Source) {
	best, src := fallback, SourceShared
	if n.lkg != nil {
		if m := n.lkg.Get(key, now); m != nil && (best == nil || m.origin > best.origin) {
			best, src = m, SourceMemory
		}
	}
	if best == nil || now >= n.staleUntil(best) || n.grade(key, best, now) > worst {
		return nil, 0
	}
	return best, src
}

func (n *Namespace) observe(d time.Duration, err error) {
	box := n.c.recorder.Load()
	if box == nil {
		return
	}
	outcome := loadOutcomeName(err)
	for _, rec := range box.rs {
		rec.ObserveLoad(n.name, d, outcome)
	}
}

// loadOutcomeName names a load's outcome for the Recorder and traces.
func loadOutcomeName(err error) string {
	outcome := "ok"
	var pe *PanicError
	switch {
	case err == nil:
	case isNotFound(err):
		outcome = "not_found"
	case errors.As(err, &pe):
		outcome = "panic"
	case errors.Is(err, context.DeadlineExceeded):
		outcome = "timeout"
	default:
		outcome = "error"
	}
	return outcome
}
