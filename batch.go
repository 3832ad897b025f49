package holdfast

import (
	"context"
	"fmt"
	"sync"
)

// BatchLoader loads many keys in one call (one SQL query with IN (...), say).
// Keys absent from the returned map are not found.
type BatchLoader interface {
	LoadMany(ctx context.Context, keys []string) (map[string][]byte, error)
}

// BatchLoaderFunc adapts a function to a BatchLoader.
type BatchLoaderFunc func(ctx context.Context, keys []string) (map[string][]byte, error)

// LoadMany calls f(ctx, keys).
func (f BatchLoaderFunc) LoadMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	return f(ctx, keys)
}

// GetMany reads many keys at once. It returns one Result and one error per
// key, in the order of keys; errs is nil when every key succeeded (a not-found
// key has ErrNotFound). Keys are coalesced one by one with every other read
// in the process; the keys that this call must load go to the shared tier in
// one batch and to loader in one call.
func (n *Namespace) GetMany(ctx context.Context, keys []string, loader BatchLoader) (results []Result, errs []error) {
	results = make([]Result, len(keys))
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
	var mine []string
	var mineFlights []*flight
	now := n.now()
	for i, key := range keys {
		if err := n.checkKey(key); err != nil {
			setErr(i, err)
			continue
		}
		if n.hotKeys != nil && n.hotKeys.Record(key, now) && n.hot != nil && n.p.Hot.Keys == HotDetected && !n.sharedHotKey(key, now) {
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
			mine = append(mine, key)
			mineFlights = append(mineFlights, f)
		} else {
			n.ctr.inc(evCoalesced)
		}
		waits[key] = waiter{f, !leader}
	}
	if len(mine) > 0 && !n.c.goOwned(func() { n.runBatch(mine, mineFlights, loader) }) {
		for i, key := range mine {
			n.flights.done(key, mineFlights[i])
			mineFlights[i].finish(Result{}, ErrClosed)
		}
	}
	for i, key := range keys {
		w, ok := waits[key]
		if !ok {
			continue
		}
		res, err := n.wait(ctx, w.f, w.collapsed)
		results[i] = res
		setErr(i, err)
	}
	return results, errs
}

// runBatch is the flight body for the keys a GetMany leads: one shared-tier
// batch read, then one batch load for the keys that need it.
// maxConcurrentVersionReads bounds the version reads one batch has in
// flight at once.
const maxConcurrentVersionReads = 32

func (n *Namespace) runBatch(keys []string, flights []*flight, loader BatchLoader) {
	// The lookups are bounded by LoadTimeout (and by the tier's own
	// budgets); the loader and the write get a LoadTimeout of their own.
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	outs := make([]outcome, len(keys))
	defer func() {
		for i, key := range keys {
			n.flights.done(key, flights[i])
			flights[i].finish(outs[i].res, outs[i].err)
		}
	}()

	now := n.now()
	pending := make([]int, 0, len(keys)) // indexes still without an answer
	for i, key := range keys {
		if out, ok := n.recheckHot(key, now, 0); ok {
			outs[i] = out
			continue
		}
		pending = append(pending, i)
	}
	if len(pending) == 0 {
		return
	}

	metas := make([]meta, len(keys))
	statuses := make([]tierStatus, len(keys))
	if n.c.opts.Shared == nil {
		for i := range statuses {
			statuses[i] = tierNone
		}
	}
	if t := n.c.opts.Shared; t != nil {
		qualified := make([]string, len(pending))
		for j, i := range pending {
			qualified[j] = n.prefix + keys[i]
		}
		lookups, err := t.GetMany(ctx, qualified)
		for j, i := range pending {
			switch {
			case err != nil:
				n.countTierError(err, evSharedError)
				statuses[i] = tierDown
			case j >= len(lookups):
				n.ctr.inc(evSharedError)
				statuses[i] = tierDown
			default:
				metas[i], statuses[i] = n.decodeLookup(keys[i], lookups[j])
			}
		}
	}
	fallbacks := make([]*meta, len(keys))
	toLoad := pending[:0:0]
	for _, i := range pending {
		out, done, fb := n.afterShared(flights[i], keys[i], &metas[i], statuses[i], now, 0)
		if done {
			outs[i] = out
			continue
		}
		fallbacks[i] = fb
		toLoad = append(toLoad, i)
	}
	if len(toLoad) == 0 {
		return
	}
	// Versions are read before the source, concurrently: a Coordinator's
	// Version is one round trip, and concurrent calls share round trips
	// (rueidis pipelines them on one connection), so a batch of misses
	// waits about one round trip instead of one per key.
	versions := make([]version, len(keys))
	if n.coord != nil {
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxConcurrentVersionReads)
		for _, i := range toLoad {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				versions[i] = n.readVersion(ctx, keys[i], statuses[i])
			})
		}
		wg.Wait()
	}
	if !n.acquire(ctx, false) {
		n.ctr.add(evRejected, uint64(len(toLoad)))
		for _, i := range toLoad {
			res, err := n.failed(flights[i], keys[i], fallbacks[i], fmt.Errorf("holdfast: %s: load of %q: %w", n.name, keys[i], ErrOverloaded))
			outs[i] = outcome{res, err}
		}
		return
	}
	loadKeys := make([]string, len(toLoad))
	for j, i := range toLoad {
		loadKeys[j] = keys[i]
	}
	n.ctr.add(evLoad, uint64(len(toLoad)))
	lctx, lcancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer lcancel()
	start := n.c.clock.Now()
	vals, err := callBounded(n.c, lctx, func(ctx context.Context) (map[string][]byte, error) { return loader.LoadMany(ctx, loadKeys) }, n.release)
	lo := n.loadOutcome(lctx, start, err)
	var writes []Item
	var vers []version
	var writers []*flight
	for _, i := range toLoad {
		klo := lo
		klo.ver = versions[i]
		if lo.err == nil {
			v, ok := vals[keys[i]]
			if ok {
				klo.val = v
			} else {
				klo.err = ErrNotFound
			}
		}
		var w *Item
		outs[i], w = n.loaded(flights[i], keys[i], klo, fallbacks[i])
		if w != nil {
			writes = append(writes, *w)
			vers = append(vers, versions[i])
			writers = append(writers, flights[i])
		}
	}
	// One pipelined write for the batch; each flight's store lock is held
	// until it is done, so an invalidation cannot slip in between.
	if len(writes) > 0 {
		n.writeShared(writes, vers)
	}
	for _, f := range writers {
		f.endStore()
	}
}

// decodeLookup classifies the shared tier's answer for key. A key whose
// invalidation has not reached the tier yet reads as a miss.
func (n *Namespace) decodeLookup(key string, l Lookup) (meta, tierStatus) {
	switch {
	case l.Err != nil:
		n.countTierError(l.Err, evSharedError)
		return meta{}, tierDown
	case !l.Found || n.pending.has(key):
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	m, err := decodeMeta(l.Value)
	if err != nil {
		n.ctr.inc(evCorrupt)
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	if n.recent.supersedes(key, m.origin, n.now(), n.supersedeWindow()) {
		n.ctr.inc(evSuperseded)
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	n.ctr.inc(evSharedHit)
	return m, tierHit
}
