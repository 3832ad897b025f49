package holdfast

import (
	"context"
	"fmt"
	"sync"
)

// The read path. Get and GetMany walk the same stages, so every guarantee
// holds for both:
//
//  1. the hot tier, on the caller's goroutine (read.go);
//  2. the flight: concurrent reads of a key in this process join one flight
//     (flight.go), whose leader runs the rest;
//  3. lookup: the hot tier again, the shared tier (a hot key's smeared
//     copy), and last-known-good while the shared tier fails (lookup.go);
//  4. load: the key's version, its lease (lease.go), the load-error
//     backoff, the limiter, the loader bounded by LoadTimeout, and the
//     stores (load.go, store.go).
//
// Each key of a flight is a job carried through the stages; Get's flights
// have one, GetMany's leader has one per key it leads and batches each
// stage's I/O (one shared-tier read, one loader call, one write).

// job is one key's work inside a flight.
type job struct {
	key       string
	f         *flight
	refreshOf int64      // a background refresh: the origin of the value it replaces
	status    tierStatus // the shared tier's answer
	fallback  *meta      // a value stale-if-error may still serve
	ver       version    // the key's version, read before the source
	verRead   bool       // ver was read with the shared tier's answer
	lease     *lease     // held while this process loads the key
	waiting   bool       // another process holds the key's lease
	refill    *meta      // a copy in memory to write back instead of loading
	done      bool       // out is the flight's answer
	out       outcome
}

// finish ends j's flight with its answer. Leaving the group first means
// readers that come after find the stored value in the tiers, or start a
// new flight.
func (n *Namespace) finish(j *job) {
	n.flights.done(j.key, j.f)
	j.f.finish(j.out.res, j.out.err)
}

// Get returns the value for key: from the hot tier, else from the shared
// tier, else from loader, coalescing concurrent reads of the key so that
// loader runs once. A value past its soft time is returned at once while one
// background refresh runs; when fresh data cannot be had, a value within the
// stale-if-error window is returned (Result.Reason says why). A loader's
// ErrNotFound is cached for NegativeTTL (unless that is negative) and
// returned as ErrNotFound.
//
// ctx bounds only this caller's wait: when it ends, Get returns ctx.Err() and
// the load goes on for the other waiters. The loader's context carries
// ctx's values (trace ids, say) but not its cancellation or deadline.
func (n *Namespace) Get(ctx context.Context, key string, loader Loader) (Result, error) {
	if n.c.closed.Load() {
		return Result{}, ErrClosed
	}
	if err := n.checkKey(key); err != nil {
		return Result{}, err
	}
	if n.hot != nil {
		now := n.now()
		if n.hotKeys != nil && n.hotKeys.Record(key, now) && n.hotDetected && !n.sharedHotKey(key, now) {
			// The key has cooled: it leaves the hot tier now rather
			// than at its hot TTL, which keeps the tier to the keys
			// that are hot.
			n.hot.Delete(key)
		}
		if m := n.hot.Get(key, now); m != nil {
			n.ctr.inc(evHotHit)
			if n.p.EarlyRefresh.XFetchBeta > 0 && n.xfetchDue(m, now) {
				n.startRefresh(ctx, key, loader, m.origin)
			}
			if !m.NotFound {
				return m.Result, nil // the hot tier's copy: see meta
			}
			return n.servedNegative(m, SourceHot)
		}
	} else if n.hotKeys != nil {
		n.hotKeys.Record(key, n.now())
	}
	// Reads are counted here, past the hot tier; Stats adds the hot hits,
	// which saves a hit its second counter.
	n.ctr.inc(evRead)
	growStack(0)
	return n.fetch(ctx, key, loader)
}

// fetch joins or starts the flight for key and waits for its answer.
//
// A leader looks the key up itself, hot tier again and shared tier, on its
// own goroutine: a shared-tier hit, the common miss of the hot tier, then
// costs no goroutine and no hand-off (measured here: a goroutine per flight
// halved shared-hit throughput). That read ignores the leader's
// cancellation, since joiners depend on it, and is bounded by the tier's
// read budget. Only a load moves to a goroutine of the Cache's, detached
// from every caller.
func (n *Namespace) fetch(ctx context.Context, key string, loader Loader) (res Result, err error) {
	if isNil(loader) {
		return Result{}, fmt.Errorf("holdfast: %s: read of %q: %w", n.name, key, errNilLoader)
	}
	if tr := n.c.opts.Tracer; tr != nil {
		var rt readTrace
		ctx, rt = n.startRead(ctx, tr, []string{key})
		defer func() { rt.End(res, err) }()
	}
	f, leader := n.flights.join(key)
	if !leader {
		n.ctr.inc(evCoalesced)
		return n.wait(ctx, key, f, true)
	}
	// The job lives on this goroutine's stack through the lookup, which
	// answers most flights (a shared-tier hit); only a load moves it to the
	// heap, for the goroutine that runs the load.
	jv := job{key: key, f: f}
	if n.c.closed.Load() {
		jv.out.err = ErrClosed
		n.finish(&jv)
		return Result{}, ErrClosed
	}
	// The lookup keeps ctx's values but not its cancellation: joiners
	// depend on it, and the tier bounds it by its read budget (an
	// uncancellable context also lets the Redis tier share one deadline
	// among the reads of a millisecond).
	detached := context.WithoutCancel(ctx)
	now := n.exactNow()
	if n.slowReadOn() && n.c.shared.suspect(now, n.slowReadDelay()) && n.fromMemory(key, now) != nil {
		// The tier may be slow and a value the reader may be served is
		// in hand: the read goes to a goroutine of the Cache's, so that
		// a slow tier costs this reader the slow-read delay, not the
		// read budget (wait). The flight goes on as the leader's own
		// would.
		if err := n.goFlight(detached, &jv, func(j *job) { n.run(detached, []*job{j}, source{one: loader}) }); err != nil {
			return Result{}, err
		}
		return n.wait(ctx, key, f, false)
	}
	n.lookupOne(detached, &jv, now)
	if jv.done {
		if !n.flights.leave(key, jv.f) {
			jv.f.finish(jv.out.res, jv.out.err)
		}
		return jv.out.res, jv.out.err
	}
	n.toLoad(&jv)
	if err := n.goFlight(detached, &jv, func(j *job) { n.loadAndFinish(detached, []*job{j}, source{one: loader}) }); err != nil {
		return Result{}, err
	}
	return n.wait(ctx, key, f, false)
}

// goFlight moves the job jv to the heap and runs fn with it on a goroutine
// of the Cache's, under ctx's pprof labels; if the Cache is closed it ends the job's flight with
// ErrClosed instead, and returns that.
func (n *Namespace) goFlight(ctx context.Context, jv *job, fn func(*job)) error {
	j := new(job)
	*j = *jv
	if !n.c.goLoad(ctx, func() { fn(j) }) {
		j.out = outcome{err: ErrClosed}
		n.finish(j)
		return ErrClosed
	}
	return nil
}

// GetMany reads many keys at once. It returns one Result and one error per
// key, in the order of keys; errs is nil when every key succeeded (a not-found
// key has ErrNotFound). Keys are coalesced one by one with every other read
// in the process (Get's and GetMany's); the keys this call leads go through
// the same stages as Get's, with one shared-tier batch read, one call of
// loader for the keys that must be loaded, and one batch write.
func (n *Namespace) GetMany(ctx context.Context, keys []string, loader BatchLoader) (results []Result, errs []error) {
	results = make([]Result, len(keys))
	if n.c.closed.Load() || isNil(loader) {
		err := ErrClosed
		if !n.c.closed.Load() {
			err = fmt.Errorf("holdfast: %s: read of %d keys: %w", n.name, len(keys), errNilLoader)
		}
		errs = make([]error, len(keys))
		for i := range errs {
			errs[i] = err
		}
		return results, errs
	}
	setErr := func(i int, err error) {
		if err == nil {
			return
		}
		if errs == nil {
			errs = make([]error, len(keys))
		}
		errs[i] = err
	}

	type waiter struct {
		f         *flight
		collapsed bool
	}
	waits := make(map[string]waiter, len(keys))
	var mine []*job
	now := n.now()
	for i, key := range keys {
		if err := n.checkKey(key); err != nil {
			setErr(i, err)
			continue
		}
		if n.hotKeys != nil && n.hotKeys.Record(key, now) && n.hot != nil && n.hotDetected && !n.sharedHotKey(key, now) {
			n.hot.Delete(key) // cooled; see Get
		}
		if _, seen := waits[key]; seen {
			continue
		}
		if n.hot != nil {
			if m := n.hot.Get(key, now); m != nil {
				n.ctr.inc(evHotHit)
				res, err := n.served(m, SourceHot)
				results[i] = res
				setErr(i, err)
				continue
			}
		}
		n.ctr.inc(evRead) // past the hot tier; see Get
		f, leader := n.flights.join(key)
		if leader {
			mine = append(mine, &job{key: key, f: f})
		} else {
			n.ctr.inc(evCoalesced)
		}
		waits[key] = waiter{f, !leader}
	}
	if tr := n.c.opts.Tracer; tr != nil && len(waits) > 0 {
		left := make([]string, 0, len(waits))
		for k := range waits {
			left = append(left, k)
		}
		var rt readTrace
		ctx, rt = n.startRead(ctx, tr, left)
		defer func() {
			var res Result
			var err error
			for i, k := range keys {
				if _, ok := waits[k]; ok {
					res = results[i]
					if errs != nil {
						err = errs[i]
					}
					break
				}
			}
			rt.End(res, err)
		}()
	}
	if len(mine) > 0 {
		detached := context.WithoutCancel(ctx)
		if n.c.closed.Load() || !n.c.goLoad(detached, func() { n.run(detached, mine, source{many: loader}) }) {
			for _, j := range mine {
				j.out = outcome{err: ErrClosed}
				n.finish(j)
			}
		}
	}
	for i, key := range keys {
		w, ok := waits[key]
		if !ok {
			continue
		}
		res, err := n.wait(ctx, key, w.f, w.collapsed)
		results[i] = res
		setErr(i, err)
	}
	return results, errs
}

// run takes jobs through every stage on the calling goroutine (one of the
// Cache's) and finishes their flights, each as soon as it has its answer.
func (n *Namespace) run(ctx context.Context, js []*job, src source) {
	n.lookup(ctx, js)
	pending := js[:0:0]
	for _, j := range js {
		if j.done {
			n.finish(j)
		} else {
			n.toLoad(j)
			pending = append(pending, j)
		}
	}
	if len(pending) > 0 {
		n.loadAndFinish(ctx, pending, src)
	}
}

// loadAndFinish is the load stage for jobs whose lookup found no usable
// value, then the end of their flights.
func (n *Namespace) loadAndFinish(ctx context.Context, js []*job, src source) {
	n.load(ctx, js, src)
	for _, j := range js {
		n.finish(j)
	}
}

// startRefresh starts a background refresh of key unless a flight for it is
// in progress: at most one refresh per key per process. origin is the
// origin of the value it replaces.
func (n *Namespace) startRefresh(ctx context.Context, key string, loader Loader, origin int64) {
	f, leader := n.flights.join(key)
	if !leader {
		return
	}
	n.ctr.inc(evRefresh)
	j := &job{key: key, f: f, refreshOf: origin}
	detached := context.WithoutCancel(ctx)
	if !n.c.goLoad(detached, func() { n.run(detached, []*job{j}, source{one: loader}) }) {
		j.out = outcome{err: ErrClosed}
		n.finish(j)
	}
}

// each runs fn for every job: inline for one, else concurrently, at most
// maxConcurrentPerBatch at once. A batch's per-key round trips (versions,
// leases) then cost about one round trip, since concurrent calls share them
// (rueidis pipelines them on one connection).
func each(js []*job, fn func(*job)) {
	if len(js) == 1 {
		fn(js[0])
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentPerBatch)
	for _, j := range js {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(j)
		})
	}
	wg.Wait()
}

// maxConcurrentPerBatch bounds the per-key calls one batch has in flight.
const maxConcurrentPerBatch = 32
