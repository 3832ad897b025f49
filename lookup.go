package holdfast

import (
	"context"
	"sync"

	"github.com/holdfast-dev/holdfast/tier"
)

// lookup is the stage after the flight's start: for each job, the hot tier
// again, then the shared tier (and, while it fails, last-known-good). A job
// it answers is done; the others must load, and a stale value may have been
// published to their readers already, the load then being its refresh.
//
// One job reads its key with Get (or a copy with GetSmeared, for a hot key
// the tier smears); many read the plain keys in one GetMany and each hot
// key's copy on its own, concurrently.
func (n *Namespace) lookup(ctx context.Context, js []*job) {
	if len(js) == 1 {
		n.lookupOne(ctx, js[0], n.exactNow())
		return
	}
	now := n.exactNow()
	toRead := js[:0:0]
	for _, j := range js {
		if out, ok := n.recheckHot(j.key, now, j.refreshOf); ok {
			j.out, j.done = out, true
			continue
		}
		toRead = append(toRead, j)
	}
	if len(toRead) == 0 {
		return
	}
	metas := make([]meta, len(toRead))
	statuses := make([]tierStatus, len(toRead))
	if n.c.opts.Shared == nil {
		for i := range statuses {
			statuses[i] = tierNone
		}
	} else {
		st := n.startStage(ctx, traceSharedRead)
		n.sharedGetMany(ctx, toRead, metas, statuses)
		for i := range metas {
			metas[i].current = now // found current by a read sent then
		}
		if st != nil {
			worst := tierHit
			for _, s := range statuses {
				if s == tierDown || (s == tierMiss && worst == tierHit) {
					worst = s
				}
			}
			st.End(stageResult{Outcome: statusOutcome(worst)})
		}
	}
	// The shared tier may have taken up to its read budget (two, for a
	// smeared copy that missed): judge the answers by the time now.
	now = n.exactNow()
	for i, j := range toRead {
		j.f.readOver.Store(true)
		j.status = statuses[i]
		j.out, j.done, j.fallback = n.afterShared(j.f, j.key, &metas[i], statuses[i], now, j.refreshOf)
		n.pickRefill(j, now)
	}
}

// lookupOne is lookup for one job, the common case (every Get), without
// the batch's slices, starting at now (the clock's reading: a read costs
// two of them).
func (n *Namespace) lookupOne(ctx context.Context, j *job, now int64) {
	if out, ok := n.recheckHot(j.key, now, j.refreshOf); ok {
		j.out, j.done = out, true
		return
	}
	var m meta
	j.status = tierNone
	switch {
	case n.c.opts.Shared == nil:
	case n.passOver(j.key, now):
		n.ctr.inc(evSharedBypassed)
		j.status = tierDown
	default:
		n.c.shared.readBegins(now)
		m, j.status = n.sharedReadTraced(ctx, j, now)
		m.current = now // found current by a read sent then
		began := now
		now = n.exactNow() // see lookup
		n.c.shared.readEnds(began, now, j.status == tierHit || j.status == tierMiss)
	}
	j.f.readOver.Store(true)
	j.out, j.done, j.fallback = n.afterShared(j.f, j.key, &m, j.status, now, j.refreshOf)
	n.pickRefill(j, now)
}

// sharedGetMany reads the jobs' keys from the shared tier into metas and
// statuses: the keys the tier smears each from one of its copies, the rest
// in one GetMany.
func (n *Namespace) sharedGetMany(ctx context.Context, js []*job, metas []meta, statuses []tierStatus) {
	var plain []int
	var smeared []int
	for i, j := range js {
		if n.smearing(j.key) {
			smeared = append(smeared, i)
		} else {
			plain = append(plain, i)
		}
	}
	var wg sync.WaitGroup
	for _, i := range smeared {
		wg.Go(func() { metas[i], statuses[i] = n.sharedGet(ctx, js[i].key) })
	}
	if len(plain) > 0 {
		qualified := make([]string, len(plain))
		for k, i := range plain {
			qualified[k] = n.prefix + js[i].key
		}
		lookups, err := n.c.opts.Shared.GetMany(ctx, qualified)
		for k, i := range plain {
			switch {
			case err != nil:
				n.countTierError(err, evSharedError)
				statuses[i] = tierDown
			case k >= len(lookups):
				n.ctr.inc(evSharedError)
				statuses[i] = tierDown
			default:
				metas[i], statuses[i] = n.decodeLookup(js[i].key, lookups[k])
			}
		}
	}
	wg.Wait()
}

type tierStatus int

const (
	tierMiss tierStatus = iota
	tierHit
	tierDown
	tierNone // there is no shared tier
)

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
		newer := refreshOf == 0 || m.origin > refreshOf
		if newer && !m.NotFound && now >= m.hard && now < n.staleUntil(m) {
			// Past hard it is no answer, but it is the last value this
			// process knows: last-known-good keeps it for stale-if-error,
			// so a failed load can serve it after the tier lost it.
			n.storeLocal(f, key, m, now)
		}
		if now < m.hard && newer {
			n.storeLocal(f, key, m, now)
			if now < m.soft || m.NotFound {
				res, err := n.served(m, SourceShared)
				return outcome{res, err}, true, nil
			}
			// Between soft and hard: answer now, refresh in this flight.
			n.ctr.inc(evStaleServed)
			n.ctr.inc(evRefresh)
			res, _ := n.servedFor(m, SourceShared, ReasonRevalidating, now)
			f.publish(res, nil)
		}
		if !m.NotFound {
			// A copy: m is the caller's, on its stack for the common
			// case, a hit that needs no fallback.
			fb := *m
			fallback = &fb
		}
	case tierDown, tierNone:
		if refreshOf != 0 || n.lkg == nil {
			break
		}
		// The shared tier cannot answer: the last value this process saw is
		// served while within its hard time, so an
		// outage costs one load per key per hard TTL, not one per read.
		lm := n.lkg.Get(key, now)
		if lm == nil || now >= lm.hard || n.grade(key, lm, now) != gradeCurrent {
			break
		}
		// Without a shared tier, memory is the tier below the hot one:
		// its answers are normal ones.
		why := ReasonTierDown
		if status == tierNone {
			why = 0
		}
		if now < lm.soft {
			n.ctr.inc(evLocalServed)
			res, err := n.servedFor(lm, SourceMemory, why, now)
			return outcome{res, err}, true, nil
		}
		if why == 0 {
			why = ReasonRevalidating
		}
		n.ctr.inc(evStaleServed)
		n.ctr.inc(evRefresh)
		res, _ := n.servedFor(lm, SourceMemory, why, now)
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
	return n.decodeLookup(key, tier.Lookup{Value: v, Found: found, Err: err})
}

// sharedRead is sharedGet for the lookup of job j at now, which also leaves
// j the key's version when the tier read it with the value
// (tier.VersionedGetter): a load after a miss then needs no Version call of
// its own. Only the reads likeliest to load are read so: of a key this
// process holds no copy of (most likely a miss), or only one past its soft
// time, and a refresh (both most often find that copy in the tier, and
// load). A key read within its soft time is most likely a hit, and reading
// its version too cost shared hits 4% of their throughput on a lone server
// (BenchmarkGetSharedHitRatio). A smeared copy's read is sharedGet's.
func (n *Namespace) sharedRead(ctx context.Context, j *job, now int64) (meta, tierStatus) {
	if n.vget == nil || n.lkg == nil || n.smearing(j.key) {
		return n.sharedGet(ctx, j.key)
	}
	if m := n.lkg.Get(j.key, now); m != nil && now < m.soft && j.refreshOf == 0 {
		return n.sharedGet(ctx, j.key)
	}
	l := n.vget.GetVersioned(ctx, n.prefix+j.key)
	m, status := n.decodeLookup(j.key, l.Lookup)
	if l.Versioned && status != tierDown {
		j.ver, j.verRead = version{l.Version, true}, true
	}
	return m, status
}

// decodeLookup classifies the shared tier's answer for key. A value older
// than the key's watermark reads as a miss: the tier may not have taken
// the invalidation (a node that missed it, a delete queued for replay).
func (n *Namespace) decodeLookup(key string, l tier.Lookup) (meta, tierStatus) {
	switch {
	case l.Err != nil:
		n.countTierError(l.Err, evSharedError)
		return meta{}, tierDown
	case !l.Found:
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	m, err := decodeMeta(l.Value)
	if err != nil {
		n.ctr.inc(evCorrupt)
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	if n.grade(key, &m, n.now()) != gradeCurrent {
		n.ctr.inc(evSuperseded)
		n.ctr.inc(evSharedMiss)
		return meta{}, tierMiss
	}
	n.ctr.inc(evSharedHit)
	return m, tierHit
}
