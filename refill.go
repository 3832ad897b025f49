package holdfast

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// Refill from memory. When the shared tier misses a key (a node restarted
// empty, a replica promoted without the latest writes, an eviction) and
// this process holds a copy of it as current as the tier's was, the copy
// answers the read and is written back to the tier (tier.Refiller), so
// that a fleet holding every value in memory does not reload them all from
// the source at once. So does a hit of an older load past its hard time
// when the copy here is a newer load, whose own write failed: loaded while
// the tier was down, after a failover the promoted replica holds the
// older one (tier.OverRefiller).
//
// A copy is written back only if no invalidation can have passed it
// unheard here:
//   - in last-known-good, not a cached not-found, and before its soft
//     time (past it, the key loads as it would have);
//   - found current (loaded, or read from the tier) while the invalidation
//     stream was heard: in the heard period now, or in the one before the
//     latest gap, ended or not, well before its last heartbeat
//     (streamState.refillable); or loaded here in that gap, from when
//     the stream was lost (streamState.loadedInGap). An invalidation
//     missed here was then made in that one gap, which the outage that
//     emptied the node is, and for a copy loaded in it, after its load
//     began;
//   - current by its key's watermark (no invalidation made or heard here
//     since its origin) and its flight not overtaken by an invalidation,
//     checked under the flight's store lock, which is held across the
//     write-back as a load's write holds it.
//
// An emptied node has lost the keys' versions with their values, so the
// stale-set guard's compare-and-set proves nothing there. The write-back
// is instead one atomic check and write on the node (Refill): only where
// the node holds neither a value of the key nor a version (RefillOver:
// nor a value but the older load this read found). So an
// invalidation that reaches the node before it (one made after the
// restart, or replayed by a process that could not reach the node during
// the outage) refuses it and the key loads; one that reaches the node
// after it deletes it and is announced, which makes the copy here a
// fallback. What it cannot see is an invalidation the node took, and lost
// with its data, while this process no longer heard it
// (doc/across-processes.md). Of several processes writing the same key
// back, one lands and the others are handed its value: one write-back per
// key.

// pickRefill sets j.refill to the copy in memory that job j, which missed
// in the shared tier, may write back instead of loading, if it has one.
// The flight then stays in its read stage: its readers wait for the
// write-back as for a shared-tier read, and past the slow-read delay take
// the copy in memory (tier-slow), so that a slow or unreachable primary
// costs them that delay, not the write's timeout.
func (n *Namespace) pickRefill(j *job, now int64) {
	if j.refill = n.refillCopy(j, now); j.refill != nil {
		j.f.readOver.Store(false)
	}
}

// refillCopy returns the copy in memory that job j, which missed in the
// shared tier or found there only an older load past its hard time, may
// write back instead of loading, or nil.
func (n *Namespace) refillCopy(j *job, now int64) *meta {
	if j.done || j.refreshOf != 0 || n.c.caps.refill == nil || n.c.caps.stream == nil || n.lkg == nil {
		return nil
	}
	var over *meta
	switch j.status {
	case tierMiss:
	case tierHit:
		// A newer load whose write failed (the tier was down when it was
		// loaded) replaces the older one, which no read may serve.
		if over = j.fallback; over == nil || now < over.hard || n.overRefiller() == nil {
			return nil
		}
	default:
		return nil
	}
	m := n.lkg.Get(j.key, now)
	if m == nil || m.NotFound || now >= m.soft || over != nil && m.origin <= over.origin ||
		!n.c.stream.refillable(m.currentAt()) && !(m.current == 0 && n.c.stream.loadedInGap(m.origin)) ||
		n.grade(j.key, m, now) != gradeCurrent {
		return nil
	}
	return m
}

// overRefiller returns the shared tier's tier.OverRefiller, or nil.
func (n *Namespace) overRefiller() tier.OverRefiller {
	o, _ := n.c.caps.refill.(tier.OverRefiller)
	return o
}

// refill writes back the copies of the jobs that have one, concurrently,
// and returns the jobs that must still load: those without a copy, and
// those whose write-back the tier refused.
func (n *Namespace) refill(js []*job) []*job {
	k := 0
	for _, j := range js {
		if j.refill != nil {
			k++
		}
	}
	if k == 0 {
		return js
	}
	with := make([]*job, 0, k)
	for _, j := range js {
		if j.refill != nil {
			with = append(with, j)
		}
	}
	each(with, n.writeBack)
	left := js[:0:0]
	for _, j := range js {
		if !j.done {
			left = append(left, j)
		}
	}
	return left
}

// writeBack writes j's copy back to the shared tier and answers j with it,
// or with the value the tier holds already; it leaves j to load when the
// tier refused because the key was invalidated, or the copy's time ran out.
func (n *Namespace) writeBack(j *job) {
	m := j.refill
	j.refill = nil
	// Until now the flight was in its read stage (pickRefill); a job left
	// to load moves on to the load stage.
	defer func() {
		j.f.readOver.Store(true)
		if !j.done {
			n.toLoad(j)
		}
	}()
	if !j.f.beginStore() {
		// Invalidated since the lookup: the load that follows is
		// refused its store as any would be.
		j.f.endStore()
		return
	}
	defer j.f.endStore()
	sent := n.exactNow()
	if sent >= m.soft {
		return
	}
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	item := tier.Item{Key: n.prefix + j.key, Value: m.raw, TTL: time.Duration(n.staleUntil(m) - sent)}
	var (
		written bool
		held    []byte
		err     error
	)
	if j.status == tierHit {
		written, held, err = n.overRefiller().RefillOver(ctx, item, j.fallback.raw)
	} else {
		written, held, err = n.c.caps.refill.Refill(ctx, item)
	}
	now := n.exactNow()
	switch {
	case err != nil:
		n.countTierError(err, evSharedSetError)
		if now < m.hard {
			// The tier failed the write as it would have failed a read:
			// the copy answers as last-known-good does then.
			n.ctr.inc(evLocalServed)
			res, rerr := n.servedFor(m, SourceMemory, ReasonTierDown, now)
			j.out, j.done = outcome{res, rerr}, true
		}
	case written:
		n.ctr.inc(evRefilled)
		d := *m
		d.current = sent // the tier holds this load now, as a read sent then would have found
		n.putLocal(j.key, &d, now)
		res, rerr := n.servedFor(&d, SourceMemory, 0, now)
		j.out, j.done = outcome{res, rerr}, true
	case held != nil:
		// Another process loaded the key or wrote it back first. Its
		// value was counted when the lookup read it, if it was there
		// then (corrupt bytes, say): it is not counted again.
		hm, err := decodeMeta(held)
		if err != nil || n.grade(j.key, &hm, now) != gradeCurrent {
			return
		}
		if now < hm.soft || hm.NotFound && now < hm.hard {
			hm.current = sent
			n.putLocal(j.key, &hm, now)
			res, rerr := n.served(&hm, SourceShared)
			j.out, j.done = outcome{res, rerr}, true
		} else if !hm.NotFound {
			j.fallback = &hm // past its soft time: loaded, and kept for a failed load
		}
	}
}

// refillable reports whether a copy found current at t has missed no
// invalidation as far as the stream can tell, but for those one gap may
// hide: t is in the heard period now, or in the last one before the gap
// now or the one that has just ended, refillSlack before its last Heard.
// (An invalidation made in that gap is in the tier's versions, and
// refuses the write-back, or deletes it when it lands after.)
func (s *streamState) refillable(t int64) bool {
	if s.gap.Load() {
		return t >= s.resumedAt.Load() && t < s.lostHeard.Load()-int64(refillSlack)
	}
	if t >= s.resumedAt.Load() {
		return true
	}
	return t >= s.prevFrom.Load() && t < s.prevTo.Load()-int64(refillSlack)
}

// loadedInGap reports whether a value this process loaded at origin was
// loaded in the latest gap, from when the stream was lost (not in the
// one before the stream was first heard): an invalidation it missed was
// then made after its load began, in that one gap, as for a copy of the
// heard period before it. A copy loaded after the last heartbeat but
// before the loss is not vouched for by either.
func (s *streamState) loadedInGap(origin int64) bool {
	lost := s.lostAt.Load()
	if lost == 0 || origin < lost {
		return false
	}
	return s.gap.Load() || origin < s.resumedAt.Load()
}

// refillSlack is how long before a heartbeat was heard a copy must have
// been found current for that heartbeat to vouch for it: a heartbeat
// certifies the announcements published before the server relayed it,
// which is a network leg and a scheduling delay before it was heard.
const refillSlack = 250 * time.Millisecond
