package holdfast

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// Leases coalesce one key's loads across processes (Policy.Lease): on a
// shared-tier miss a process takes the key's lease before it loads, and the
// others wait for the value it stores instead of loading too (the lease
// tokens of Facebook's memcache, NSDI 2013).
//
// A lease must never stall its key longer than its holder can legitimately
// hold it, and a holder holds it for one load at most: its loader call is
// bounded by LoadTimeout whatever the loader does. So
//   - a waiter waits at most Lease.TTL + LoadTimeout (an orphan's lifetime,
//     then one more holder's load), then loads for itself with a whole
//     LoadTimeout of its own (never with a context the wait used up);
//   - a waiter that holds the key's current value (loaded here under the
//     version the key still has, so no invalidation superseded it) serves
//     it at once and waits in the background;
//   - a release that fails, or that an ejected node or open breaker skips,
//     is retried until it lands or the lease has expired anyway, and a Lease
//     call that failed is released too, since the SET may have run on the
//     server before the reply was lost.

// lease is a lease this process holds, or may hold.
type lease struct {
	key     string // unqualified
	token   string
	expires time.Time // by the Cache's clock: when Redis drops it anyway
}

// takeLease tries once to take j's lease, and reports whether another
// process holds it: then j waits for its value (waitLease), serving the
// value this process holds meanwhile if it is current.
func (n *Namespace) takeLease(ctx context.Context, j *job) (heldElsewhere bool) {
	if !n.tryLease(ctx, j) {
		return false
	}
	n.ctr.inc(evLeaseWaits)
	n.serveHeldCurrent(j.f, j.key, j.ver)
	return true
}

// tryLease sends one Lease call for j and reports whether another process
// holds the lease. Otherwise j holds it (j.lease), or loads without one
// because the tier failed.
func (n *Namespace) tryLease(ctx context.Context, j *job) (heldElsewhere bool) {
	token := newLeaseToken()
	taken := n.c.clock.Now()
	got, err := n.coord.Lease(ctx, n.prefix+j.key, token, n.p.Lease.TTL)
	switch {
	case err != nil:
		n.countTierError(err, evSharedError)
		if !errors.Is(err, tier.ErrBypassed) {
			// The SET may have run and only its reply been lost: give back
			// whatever this token may hold.
			n.releaseLease(&lease{j.key, token, taken.Add(n.p.Lease.TTL)})
		}
		return false // the tier is failing: leases are skipped, the load goes on
	case got:
		n.ctr.inc(evLeaseTaken)
		j.lease = &lease{j.key, token, taken.Add(n.p.Lease.TTL)}
		return false
	}
	return true
}

// waitLease waits for the process holding j's lease to store the value,
// polling the shared tier, and takes the lease if it comes free. It leaves
// j done when the value arrived; otherwise j loads, holding the lease or
// not (the tier failed, or the wait ran out).
func (n *Namespace) waitLease(ctx context.Context, j *job) {
	if st := n.startStage(ctx, traceLeaseWait); st != nil {
		defer func() { st.End(stageResult{Outcome: either(j.done, "value", "load")}) }()
	}
	// A lease lives Lease.TTL at most, and whoever takes it next (another
	// waiter, maybe in another process) loads for LoadTimeout at most: past
	// both, and two polls, the wait is longer than any holder can
	// legitimately take.
	base := ctx
	ctx, cancel := context.WithTimeout(ctx, n.p.Lease.TTL+n.p.LoadTimeout+2*n.p.Lease.Poll)
	defer cancel()
	poll := time.NewTimer(n.p.Lease.Poll)
	defer poll.Stop()
	giveUp := func() {
		// Longer than a lease can be held: its holder died, or lost its
		// release. One last try for the lease, then load.
		if n.tryLease(base, j) {
			n.ctr.inc(evLeaseGaveUp)
		}
	}
	for {
		select {
		case <-poll.C:
		case <-ctx.Done():
			giveUp()
			return
		case <-n.c.ctx.Done():
			return // closing: the load that follows answers ErrClosed
		}
		m, status := n.sharedGet(ctx, j.key)
		now := n.exactNow()
		switch {
		case status == tierDown && ctx.Err() != nil:
			giveUp() // the wait ran out during the read
			return
		case status == tierDown:
			return
		case n.answeredByWait(j, &m, status, now):
			return
		case status == tierHit && now < m.hard && !j.f.published:
			// An older value, past its soft time (the holder's write has
			// not landed, or a replica is behind): the readers may have
			// it as stale while this flight keeps waiting for the new one.
			n.ctr.inc(evStaleServed)
			res, _ := n.servedFor(&m, SourceShared, ReasonRevalidating, now)
			j.f.publish(res, nil)
		}
		if n.tryLease(ctx, j) {
			poll.Reset(n.p.Lease.Poll)
			continue
		}
		if j.lease != nil {
			// The lease came free between the read above and the SET:
			// its holder may have stored the value and released it in
			// that gap (two round trips, shorter than one descheduling
			// on a busy host). One more read before loading again; the
			// lease is released with the job's (loadNow).
			m, status = n.sharedGet(ctx, j.key)
			n.answeredByWait(j, &m, status, n.exactNow())
		}
		return
	}
}

// answeredByWait answers j with the shared tier's answer m if it is one a
// waiting reader may take: a value within its soft time, or a negative
// entry within its hard time.
func (n *Namespace) answeredByWait(j *job, m *meta, status tierStatus, now int64) bool {
	if status != tierHit || !(now < m.soft || m.NotFound && now < m.hard) {
		return false
	}
	n.storeLocal(j.f, j.key, m, now)
	res, err := n.served(m, SourceShared)
	j.out, j.done = outcome{res, err}, true
	return true
}

// serveHeldCurrent answers the flight's readers at once, while it waits for
// another process's load, with the value this process holds for key if no
// invalidation has superseded it: one this process loaded after reading
// the key's version ver, still within its hard time. The flight goes on
// waiting (or loading) as that value's refresh.
func (n *Namespace) serveHeldCurrent(f *flight, key string, ver version) {
	if n.lkg == nil || !ver.known {
		return
	}
	now := n.exactNow()
	m := n.lkg.Get(key, now)
	if m == nil || m.NotFound || m.ver != uint32(ver.v+1) || now >= m.hard || n.grade(key, m, now) != gradeCurrent {
		return
	}
	if now >= m.soft {
		n.ctr.inc(evStaleServed)
	} else {
		n.ctr.inc(evLocalServed)
	}
	res, _ := n.servedFor(m, SourceMemory, ReasonPeerLoading, now)
	f.publish(res, nil)
}

// releaseRetryEvery is how often a release that did not land is retried.
const releaseRetryEvery = 50 * time.Millisecond

// releaseLease gives l up. A release that fails, or is skipped by the tier
// (an ejected node, an open breaker), is retried on a goroutine of the
// Cache's every releaseRetryEvery until it lands, l has expired anyway, or
// the Cache closes: a lease left behind would stall its key in every
// process until it expires.
func (n *Namespace) releaseLease(l *lease) {
	if n.tryRelease(l) {
		return
	}
	n.c.goOwned(func() {
		t := time.NewTicker(releaseRetryEvery)
		defer t.Stop()
		for n.c.clock.Now().Before(l.expires) {
			select {
			case <-n.c.ctx.Done():
				return
			case <-t.C:
			}
			if n.tryRelease(l) {
				return
			}
		}
	})
}

// tryRelease sends one release of l and reports whether it landed.
func (n *Namespace) tryRelease(l *lease) bool {
	ctx, cancel := context.WithTimeout(n.c.ctx, n.p.LoadTimeout)
	defer cancel()
	if err := n.coord.Release(ctx, n.prefix+l.key, l.token); err != nil {
		n.countTierError(err, evSharedDelError)
		return false
	}
	return true
}

func newLeaseToken() string {
	var b [16]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
