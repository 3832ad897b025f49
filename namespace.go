package holdfast

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/hotkey"
	"github.com/holdfast-dev/holdfast/local"
)

// Namespace is one kind of data (product info, list pages, stock, search
// results) with its own policy. Its keys live in the shared tier as
// "<namespace>:<key>".
type Namespace struct {
	c       *Cache
	name    string
	prefix  string
	p       Policy
	hot     *local.Store[meta] // nil when the hot tier is disabled
	lkg     *local.Store[meta] // nil when StaleIfError is 0
	flights *flightGroup
	limit   *limiter // this namespace's own cap, or nil
	ctr     *counters
	pending pendingDeletes
	recent  recentInvalidations
	coord   Coordinator      // the shared tier, when it coordinates processes
	hotKeys *hotkey.Detector // non-nil with Hot.Keys == HotDetected, or a smearing shared tier
	smear   Smearer          // the shared tier, when it smears hot keys
	// sharedHot is the hot set every process published (Hot.Share).
	sharedHot atomic.Pointer[sharedHotSet]
	backoff   *local.Store[struct{}] // keys whose last load failed, until LoadErrorBackoff passes
}

// entryOverhead approximates what one cached entry costs beyond its bytes (map
// slot, node, key header), so byte budgets are honest for small values.
const entryOverhead = 128

func newNamespace(c *Cache, name string, p Policy) *Namespace {
	n := &Namespace{
		c:       c,
		name:    name,
		prefix:  name + ":",
		p:       p,
		flights: newFlightGroup(),
		limit:   newLimiter(p.MaxConcurrentLoads, c.opts.LoadWait),
		ctr:     newCounters(),
	}
	if n.p.Hot.Keys == HotAuto {
		n.p.Hot.Keys = HotAll
		if c.opts.Shared != nil {
			n.p.Hot.Keys = HotDetected
		}
	}
	n.coord, _ = c.opts.Shared.(Coordinator)
	n.smear, _ = c.opts.Shared.(Smearer)
	if !p.Hot.Disabled {
		n.hot = local.New[meta](p.Hot.MaxBytes)
	}
	if (n.hot != nil && n.p.Hot.Keys == HotDetected) || n.smear != nil {
		n.hotKeys = hotkey.New(hotkey.Options{Threshold: p.Hot.Threshold, HalfLife: p.Hot.HalfLife, TopK: p.Hot.TopK})
	}
	if p.LoadErrorBackoff > 0 {
		n.backoff = local.New[struct{}](1 << 20)
	}
	// Without a shared tier, the last-known-good store is also where a value
	// waits between its soft and hard time (the hot tier drops it at soft),
	// so stale-while-revalidate needs it even with no stale-if-error window.
	if size := p.LastKnownGoodBytes; p.StaleIfError > 0 || (c.opts.Shared == nil && p.SoftTTL < p.TTL) {
		if size == 0 {
			size = DefaultLastKnownGoodBytes
		}
		n.lkg = local.New[meta](size)
	}
	return n
}

// Loading reports whether a fetch of key is in progress in this process,
// its shared-tier write included. Readers do not wait for that write; tests
// that go on to break the tier or move the clock can wait for it with this.
func (n *Namespace) Loading(key string) bool { return n.flights.inProgress(key) }

// Name returns the namespace's name.
func (n *Namespace) Name() string { return n.name }

// Policy returns the namespace's policy with defaults filled in.
func (n *Namespace) Policy() Policy { return n.p }

// Stats returns a snapshot of the namespace's counters.
func (n *Namespace) Stats() Stats {
	s := n.ctr.snapshot()
	if n.hot != nil {
		hs := n.hot.Stats()
		s.HotEntries, s.HotBytes = uint64(hs.Entries), uint64(hs.Bytes)
	}
	if n.lkg != nil {
		s.LastKnownGoodKeys = uint64(n.lkg.Stats().Entries)
	}
	s.PendingDeletes = uint64(n.pending.n.Load())
	if set := n.sharedHot.Load(); set != nil && n.now() < set.until {
		s.SharedHotKeys = uint64(len(set.keys))
	}
	return s
}

func (n *Namespace) now() int64 { return n.c.now() }

func (n *Namespace) checkKey(key string) error {
	if len(key) > n.p.MaxKeyBytes {
		n.ctr.inc(evTooLarge)
		return fmt.Errorf("holdfast: %s: key of %d bytes over the %d-byte limit: %w", n.name, len(key), n.p.MaxKeyBytes, ErrTooLarge)
	}
	return nil
}

// Get returns the value for key: from the hot tier, else from the shared
// tier, else from loader, coalescing concurrent reads of the key so that
// loader runs once. A value past its soft time is returned at once while one
// background refresh runs; when fresh data cannot be had, a value within the
// stale-if-error window is returned (Result.Source says which). A loader's
// ErrNotFound is cached for NegativeTTL and returned as ErrNotFound.
//
// ctx bounds only this caller's wait: when it ends, Get returns ctx.Err() and
// the load goes on for the other waiters.
func (n *Namespace) Get(ctx context.Context, key string, loader Loader) (Result, error) {
	if err := n.checkKey(key); err != nil {
		return Result{}, err
	}
	if n.hot != nil {
		now := n.now()
		if n.hotKeys != nil && n.hotKeys.Record(key, now) && n.p.Hot.Keys == HotDetected && !n.sharedHotKey(key, now) {
			// The key has cooled: it leaves the hot tier now rather
			// than at its hot TTL, which keeps the tier to the keys
			// that are hot.
			n.hot.Delete(key)
		}
		if m := n.hot.Get(key, now); m != nil {
			n.ctr.inc(evHotHit)
			if n.p.EarlyRefresh.XFetchBeta > 0 && n.xfetchDue(m, now) {
				n.startRefresh(key, loader, m.origin)
			}
			if !m.negative {
				// served, spelled out: the call did not inline.
				return Result{Value: m.value, Source: SourceHot, origin: m.origin, soft: m.soft, hard: m.hard}, nil
			}
			return n.servedNegative(m, SourceHot)
		}
	} else if n.hotKeys != nil {
		n.hotKeys.Record(key, n.now())
	}
	// Reads are counted here, past the hot tier; Stats adds the hot hits,
	// which saves a hit its second counter.
	n.ctr.inc(evRead)
	return n.fetch(ctx, key, loader)
}

// served turns a stored entry into a read's answer.
func (n *Namespace) served(m *meta, src Source) (Result, error) {
	if m.negative {
		return n.servedNegative(m, src)
	}
	return Result{Value: m.value, Source: src, origin: m.origin, soft: m.soft, hard: m.hard}, nil
}

func (n *Namespace) servedNegative(m *meta, src Source) (Result, error) {
	if src != SourceLoaded {
		n.ctr.inc(evNegativeHit)
	}
	return Result{Source: src, NotFound: true, origin: m.origin, soft: m.soft, hard: m.hard}, ErrNotFound
}

// xfetchDue reports whether XFetch picks this read to refresh a fresh value
// early: now − cost·β·ln(U) ≥ soft, U uniform in (0, 1].
func (n *Namespace) xfetchDue(m *meta, now int64) bool {
	if m.negative || m.costUsec == 0 {
		return false
	}
	u := 1 - rand.Float64() // (0, 1]
	early := float64(m.costUsec) * 1e3 * n.p.EarlyRefresh.XFetchBeta * -math.Log(u)
	return float64(now)+early >= float64(m.soft)
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
func (n *Namespace) fetch(ctx context.Context, key string, loader Loader) (Result, error) {
	f, leader := n.flights.join(key)
	if !leader {
		n.ctr.inc(evCoalesced)
		return n.wait(ctx, f, true)
	}
	if n.c.closed.Load() {
		n.flights.done(key, f)
		f.finish(Result{}, ErrClosed)
		return Result{}, ErrClosed
	}
	out, done, st := n.lookup(context.WithoutCancel(ctx), f, key, 0)
	if done {
		n.flights.done(key, f)
		f.finish(out.res, out.err)
		return out.res, out.err
	}
	if !n.c.goOwned(func() { n.finishFlight(f, key, loader, st) }) {
		n.flights.done(key, f)
		f.finish(Result{}, ErrClosed)
		return Result{}, ErrClosed
	}
	return n.wait(ctx, f, false)
}

func (n *Namespace) wait(ctx context.Context, f *flight, collapsed bool) (Result, error) {
	select {
	case <-f.first:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	out := f.firstOut
	// A stale value handed out while its refresh runs is past its hard time
	// for a reader arriving late: that reader waits for the refresh, the one
	// synchronous load allowed past hard.
	if out.res.Source == SourceStale && n.now() >= out.res.hard {
		select {
		case <-f.finished:
			out = f.finalOut
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}
	out.res.Collapsed = collapsed
	return out.res, out.err
}

// startRefresh starts a background refresh of key unless a flight for it is
// in progress: at most one refresh per key per process.
func (n *Namespace) startRefresh(key string, loader Loader, origin int64) {
	f, leader := n.flights.join(key)
	if !leader {
		return
	}
	n.ctr.inc(evRefresh)
	if !n.c.goOwned(func() { n.run(f, key, loader, origin) }) {
		n.flights.done(key, f)
		f.finish(Result{}, ErrClosed)
	}
}

// run performs a background refresh on its own goroutine: the lookup, then
// the load. refreshOf is the origin time of the value it replaces.
func (n *Namespace) run(f *flight, key string, loader Loader, refreshOf int64) {
	out, done, st := n.lookup(n.c.ctx, f, key, refreshOf)
	if done {
		n.flights.done(key, f)
		f.finish(out.res, out.err)
		return
	}
	n.finishFlight(f, key, loader, st)
}

// finishFlight loads for a flight whose lookup found no usable value, then
// ends the flight. Leaving the group before finishing means readers that
// come after find the stored value in the tiers, or start a new flight.
func (n *Namespace) finishFlight(f *flight, key string, loader Loader, st lookupState) {
	res, err := n.load(f, key, loader, st)
	n.flights.done(key, f)
	f.finish(res, err)
}

type tierStatus int

const (
	tierMiss tierStatus = iota
	tierHit
	tierDown
	tierNone // there is no shared tier
)

// lookupState is what a flight's lookup leaves for its load.
type lookupState struct {
	status    tierStatus // the shared tier's answer
	fallback  *meta      // a value that stale-if-error may still serve
	refreshOf int64      // for a background refresh, the origin of the value it replaces
}

// lookup is the first half of a flight: the hot tier again, then the shared
// tier (and, while it fails, last-known-good). done means the flight has its
// answer; otherwise it must load, and a stale value may have been published
// to its readers already, the load then being its refresh.
func (n *Namespace) lookup(ctx context.Context, f *flight, key string, refreshOf int64) (outcome, bool, lookupState) {
	now := n.now()
	if out, ok := n.recheckHot(key, now, refreshOf); ok {
		return out, true, lookupState{}
	}
	status := tierNone
	var m meta
	if n.c.opts.Shared != nil {
		m, status = n.sharedGet(ctx, key)
	}
	out, done, fallback := n.afterShared(f, key, &m, status, now, refreshOf)
	return out, done, lookupState{status, fallback, refreshOf}
}

// load is the second half of a flight: the key's version, a lease if the
// namespace takes them, the limiter, the loader (bounded by LoadTimeout
// whatever it does with its context), and the stores. It runs detached from
// the callers.
func (n *Namespace) load(f *flight, key string, loader Loader, st lookupState) (Result, error) {
	ver := n.readVersion(n.c.ctx, key, st.status)
	if n.p.Lease.Enabled && n.coord != nil && st.status == tierMiss && !f.published {
		out, done, l := n.leaseOrWait(f, key, ver)
		if done {
			return out.res, out.err
		}
		if l != nil {
			defer n.releaseLease(l)
		}
	}
	// The loader failed for this key moments ago: while a stale value may
	// be served, serve it rather than send the source another request it
	// will most likely fail too (one failing call per key per backoff, not
	// one per read).
	if n.backoff != nil && n.backoff.Get(key, n.now()) != nil {
		if res, ok := n.stale(f, key, st.fallback); ok {
			n.ctr.inc(evErrorBackoff)
			return res, nil
		}
	}
	if !n.acquire(n.c.ctx, f.published || st.refreshOf != 0) {
		n.ctr.inc(evRejected)
		return n.failed(f, key, st.fallback, fmt.Errorf("holdfast: %s: load of %q: %w", n.name, key, ErrOverloaded))
	}
	n.ctr.inc(evLoad)
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	start := n.c.clock.Now()
	val, err := callBounded(n.c, ctx, func(ctx context.Context) ([]byte, error) { return loader.Load(ctx, key) }, n.release)
	lo := n.loadOutcome(ctx, start, err)
	lo.val, lo.ver = val, ver
	out, write := n.loaded(f, key, lo, st.fallback)
	if write != nil {
		n.writeShared([]Item{*write}, []version{ver})
		f.endStore()
	}
	return out.res, out.err
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

// loadResult is one key's answer from a loader call.
type loadResult struct {
	val   []byte
	err   error
	start time.Time     // when the call began: the value's origin
	cost  time.Duration // how long it took
	ver   version       // the key's version read before the call
}

// recheckHot checks the hot tier again inside a flight: a flight that ended
// just before this one began may have stored the value. Refreshes skip it.
func (n *Namespace) recheckHot(key string, now, refreshOf int64) (outcome, bool) {
	if refreshOf != 0 || n.hot == nil {
		return outcome{}, false
	}
	m := n.hot.Get(key, now)
	if m == nil {
		return outcome{}, false
	}
	n.ctr.inc(evHotRecheckHit)
	res, err := n.served(m, SourceHot)
	return outcome{res, err}, true
}

// afterShared decides what a flight does with the shared tier's answer. done
// means the flight has its answer; otherwise it must load, and fallback is a
// value that stale-if-error may serve if the load fails. A stale value may
// have been published to the readers already, the load then being its
// refresh.
func (n *Namespace) afterShared(f *flight, key string, m *meta, status tierStatus, now, refreshOf int64) (out outcome, done bool, fallback *meta) {
	switch status {
	case tierHit:
		if now < m.hard && (refreshOf == 0 || m.origin > refreshOf) {
			n.storeLocal(f, key, m, now)
			if now < m.soft || m.negative {
				res, err := n.served(m, SourceShared)
				return outcome{res, err}, true, nil
			}
			// Between soft and hard: answer now, refresh in this flight.
			n.ctr.inc(evStaleServed)
			n.ctr.inc(evRefresh)
			res, _ := n.served(m, SourceStale)
			f.publish(res, nil)
		}
		if !m.negative {
			fallback = m
		}
	case tierDown, tierNone:
		if refreshOf != 0 || n.lkg == nil {
			break
		}
		// The shared tier cannot answer: the last value this process saw is
		// served while within its hard time (seed 000's decision 3), so an
		// outage costs one load per key per hard TTL, not one per read.
		lm := n.lkg.Get(key, now)
		if lm == nil || now >= lm.hard {
			break
		}
		if now < lm.soft {
			n.ctr.inc(evLocalServed)
			res, err := n.served(lm, SourceLocal)
			return outcome{res, err}, true, nil
		}
		n.ctr.inc(evStaleServed)
		n.ctr.inc(evRefresh)
		res, _ := n.served(lm, SourceStale)
		f.publish(res, nil)
	}
	return outcome{}, false, fallback
}

// sharedGet reads key from the shared tier. Corrupt bytes are a miss, counted.
func (n *Namespace) sharedGet(ctx context.Context, key string) (meta, tierStatus) {
	var v []byte
	var found bool
	var err error
	if n.smearing(key) {
		n.ctr.inc(evSmearedRead)
		v, found, err = n.smear.GetSmeared(ctx, n.prefix+key)
	} else {
		v, found, err = n.c.opts.Shared.Get(ctx, n.prefix+key)
	}
	return n.decodeLookup(key, Lookup{Value: v, Found: found, Err: err})
}

func (n *Namespace) countTierError(err error, ev event) {
	if errors.Is(err, ErrBypassed) {
		n.ctr.inc(evSharedBypassed)
	} else {
		n.ctr.inc(ev)
	}
}

// loaded stores what the loader returned in this process's tiers and
// answers the flight's readers with it. When the value must also go to the
// shared tier, write is the item to write and the flight's store lock is
// held: the caller writes it (alone, or batched with others) and then calls
// f.endStore. Readers do not wait for that write, which may be slow or
// failing (seed 000: a Redis failure during the put must neither fail the
// read nor run the loader again).
func (n *Namespace) loaded(f *flight, key string, lo loadResult, fallback *meta) (out outcome, write *Item) {
	val, err, start, cost := lo.val, lo.err, lo.start, lo.cost
	var m meta
	switch {
	case err == nil:
		if len(val) > n.p.MaxValueBytes {
			// Served to this flight's readers, never cached.
			n.ctr.inc(evTooLarge)
			t := start.UnixNano()
			return outcome{Result{Value: val, Source: SourceLoaded, origin: t, soft: t, hard: t}, nil}, nil
		}
		m = n.newEntry(val, start.UnixNano(), cost, false)
		if lo.ver.known {
			m.ver = lo.ver.v + 1
		}
	case isNotFound(err):
		n.ctr.inc(evLoadNotFound)
		m = n.newEntry(nil, start.UnixNano(), cost, true)
	default:
		n.ctr.inc(evLoadError)
		if errors.Is(err, context.DeadlineExceeded) {
			n.ctr.inc(evLoadTimeout)
		}
		if n.backoff != nil {
			n.backoff.Set(key, struct{}{}, int64(len(key))+entryOverhead, n.now()+int64(n.p.LoadErrorBackoff))
		}
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			n.c.logger().Error("holdfast: loader panicked", "namespace", n.name, "key", key, "panic", pe.Value, "stack", string(pe.Stack))
		}
		res, err := n.failed(f, key, fallback, fmt.Errorf("holdfast: %s: load of %q: %w", n.name, key, err))
		return outcome{res, err}, nil
	}
	res, rerr := n.served(&m, SourceLoaded)
	out = outcome{res, rerr}
	if !f.beginStore() {
		f.endStore()
		n.ctr.inc(evDroppedStaleSet)
		f.publish(res, rerr)
		return out, nil
	}
	now := n.now()
	n.putLocal(key, &m, now)
	f.publish(res, rerr)
	if n.c.opts.Shared == nil {
		f.endStore()
		return out, nil
	}
	ttl := time.Duration(m.hard - now)
	if !m.negative {
		// Kept past hard so that the tier itself can serve stale values
		// when the loader fails while Redis is up.
		ttl += n.p.StaleIfError
	}
	if ttl <= 0 {
		f.endStore()
		return out, nil
	}
	return out, &Item{Key: n.prefix + key, Value: m.raw, TTL: ttl}
}

// writeShared writes items to the shared tier; a failure is counted, never
// returned: a write never fails a read. With a Coordinator each item is
// written only if its key's version is still the one read before the load;
// an item whose version could not be read is not written at all, since it
// might overwrite an invalidation.
//
// The write gets a LoadTimeout of its own, whatever the load took, on top
// of the tier's own bound (the Redis tier's WriteTimeout).
func (n *Namespace) writeShared(items []Item, vers []version) {
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	if n.coord == nil {
		if err := n.c.opts.Shared.Set(ctx, items...); err != nil {
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
			n.countTierError(err, evSharedSetError)
		case !stored:
			n.ctr.inc(evDroppedStaleSet)
		}
	}
}

// smearing reports whether key is read from and written to the shared
// tier's copies: the tier smears and the key is hot now.
func (n *Namespace) smearing(key string) bool {
	return n.smear != nil && n.smear.Copies() > 1 && n.isHot(key, n.now())
}

// version is a key's invalidation version as read before a load.
type version struct {
	v     uint64
	known bool
}

// readVersion reads key's version before the source is read, when the
// shared tier is a Coordinator that answered the read just made.
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
// stale value still allowed, else with err.
//
// The time is read afresh: a load may have run for up to its timeout, and
// its readers' hard times may have passed meanwhile.
func (n *Namespace) failed(f *flight, key string, fallback *meta, err error) (Result, error) {
	if res, ok := n.stale(f, key, fallback); ok {
		return res, nil
	}
	if errors.Is(err, ErrOverloaded) {
		n.ctr.inc(evOverloaded)
	}
	return Result{}, err
}

// stale returns the newest value still allowed when fresh data cannot be
// had: the shared tier's fallback or last-known-good, within its hard time
// (stale-while-revalidate) or its stale-if-error window.
func (n *Namespace) stale(f *flight, key string, fallback *meta) (Result, bool) {
	now := n.now()
	best := fallback
	if n.lkg != nil {
		if m := n.lkg.Get(key, now); m != nil && (best == nil || m.origin > best.origin) {
			best = m
		}
	}
	if best == nil || now >= best.hard+int64(n.p.StaleIfError) {
		return Result{}, false
	}
	if now < best.hard {
		// A rejected or failed refresh keeps the value until its hard
		// time; it is still a stale-while-revalidate answer.
		if !f.published {
			n.ctr.inc(evStaleServed)
		}
		res, _ := n.served(best, SourceStale)
		return res, true
	}
	n.ctr.inc(evStaleOnError)
	res, _ := n.served(best, SourceStaleOnError)
	return res, true
}

// acquire takes a load slot from the namespace's limiter and the Cache's.
// A refresh (its readers already have a value) takes one only while more
// than a quarter of each limiter's slots are free: refreshes must not take
// the slots of readers who have nothing to serve, as they did while a slow
// database held every slot with refreshes.
func (n *Namespace) acquire(ctx context.Context, refresh bool) bool {
	if !n.limit.acquire(ctx, refresh) {
		return false
	}
	if !n.c.limit.acquire(ctx, refresh) {
		n.limit.release()
		return false
	}
	return true
}

func (n *Namespace) release() {
	n.c.limit.release()
	n.limit.release()
}

func (n *Namespace) observe(d time.Duration, err error) {
	rec := n.c.opts.Recorder
	if rec == nil {
		return
	}
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
	rec.ObserveLoad(n.name, d, outcome)
}

// newEntry builds the envelope for a freshly loaded value.
func (n *Namespace) newEntry(val []byte, origin int64, cost time.Duration, negative bool) meta {
	soft, hard := origin+int64(n.p.SoftTTL), origin+int64(n.p.TTL)
	if negative {
		soft = origin + int64(n.p.NegativeTTL)
		hard = soft
	} else if j := n.p.EarlyRefresh.Jitter; j > 0 {
		soft -= int64(float64(n.p.SoftTTL) * j * rand.Float64())
	}
	e := Entry{Value: val, Origin: time.Unix(0, origin), Soft: time.Unix(0, soft), Hard: time.Unix(0, hard), LoadCost: cost, Negative: negative}
	raw := AppendEntry(make([]byte, 0, envelopeHeader+len(val)), e)
	m, _ := decodeMeta(raw) // cannot fail: just encoded
	return m
}

// storeLocal copies an entry read from the shared tier into this process's
// tiers, unless the key was invalidated after the flight began.
func (n *Namespace) storeLocal(f *flight, key string, m *meta, now int64) {
	if !f.beginStore() {
		f.endStore()
		n.ctr.inc(evDroppedStaleSet)
		return
	}
	n.putLocal(key, m, now)
	f.endStore()
}

func (n *Namespace) putLocal(key string, m *meta, now int64) {
	size := int64(len(m.raw)+len(key)) + entryOverhead
	if n.hot != nil && n.admitHot(key, now) {
		// Never past the soft time: a hot-tier hit is always fresh.
		if exp := min(now+int64(n.p.Hot.TTL), m.soft); exp > now {
			n.hot.Set(key, *m, size, exp)
		}
	}
	if n.lkg != nil {
		if m.negative {
			n.lkg.Delete(key)
		} else {
			n.lkg.Set(key, *m, size, m.hard+int64(n.p.StaleIfError))
		}
	}
}

// admitHot reports whether key may enter the hot tier now.
func (n *Namespace) admitHot(key string, now int64) bool {
	if n.p.Hot.Keys == HotDetected && !n.isHot(key, now) {
		return false
	}
	return n.p.Hot.Admit == nil || n.p.Hot.Admit(key)
}

// HotKey is a key read often enough to be hot, and its estimated rate.
type HotKey struct {
	Key  string
	Rate float64 // reads per second
}

// HotKeys returns the namespace's hot keys now, fastest first, at most
// Hot.TopK; nil unless the namespace detects hot keys (Hot.Keys is
// HotDetected, or the shared tier smears).
func (n *Namespace) HotKeys() []HotKey {
	if n.hotKeys == nil {
		return nil
	}
	hs := n.hotKeys.Hot(n.now())
	out := make([]HotKey, len(hs))
	for i, h := range hs {
		out[i] = HotKey{h.Key, h.Rate}
	}
	return out
}

// Invalidate removes key from this process's tiers and from the shared tier.
// A load of key that began before Invalidate is not stored after it.
//
// When the shared tier's delete fails or is skipped by an open breaker, the
// local copies are dropped all the same and the delete is queued and replayed
// until the tier takes it; until then this process reads the tier's copy of
// key as a miss. Invalidate returns nil in that case too. It returns an error
// only when the replay queue is full (the delete is then lost for the shared
// tier: other processes may serve the old value until its TTL).
func (n *Namespace) Invalidate(ctx context.Context, key string) error {
	if err := n.checkKey(key); err != nil {
		return err
	}
	n.ctr.inc(evInvalidation)
	if n.c.opts.Shared != nil {
		n.recent.add(key, n.c.clock.Now().UnixNano(), n.supersedeWindow())
	}
	// Flights in progress may hold a value read from the source before the
	// caller's write: they must not store it anywhere.
	n.flights.invalidate(key)
	var err error
	if n.c.opts.Shared != nil {
		if derr := n.deleteShared(ctx, n.prefix+key); derr != nil {
			n.countTierError(derr, evSharedDelError)
			if !n.pending.add(key, n.c.opts.MaxPendingInvalidations) {
				n.ctr.inc(evDroppedDeletes)
				n.c.logger().Warn("holdfast: invalidation replay queue full; shared copy left until its TTL", "namespace", n.name, "key", key)
				err = fmt.Errorf("holdfast: %s: invalidate %q in the shared tier (replay queue full): %w", n.name, key, derr)
			}
		}
		// A read that began while the delete was on its way may have found
		// the old value still in the shared tier: its flight must not copy
		// it into this process's tiers either.
		n.flights.invalidate(key)
	}
	// Local copies go last, so none read before the shared delete survives.
	if n.hot != nil {
		n.hot.Delete(key)
	}
	if n.lkg != nil {
		n.lkg.Delete(key)
	}
	return err
}

// supersedeWindow is how long an invalidation makes older shared-tier
// values of its key read as misses in this process: past it, such a value
// is past its hard time and stale-if-error window.
func (n *Namespace) supersedeWindow() int64 { return int64(n.p.TTL + n.p.StaleIfError) }

// deleteShared removes qualified keys from the shared tier, bumping their
// versions when the tier is a Coordinator.
func (n *Namespace) deleteShared(ctx context.Context, keys ...string) error {
	if n.coord != nil {
		return n.coord.Invalidate(ctx, keys...)
	}
	return n.c.opts.Shared.Delete(ctx, keys...)
}
