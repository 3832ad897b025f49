package holdfast

import (
	"math/rand/v2"
	"time"

	"github.com/holdfast-dev/holdfast/internal/local"
	"github.com/holdfast-dev/holdfast/tier"
)

// The stores of this process: the hot tier and last-known-good. Each charges
// an entry what it takes in memory (local.Store.Cost): the key, the node
// holding the meta, the map's share, and the envelope's bytes as allocated.
// An entry in both shares its key and envelope, and each store counts them,
// so the two budgets together bound the memory from above.

// newEntry builds the envelope for a freshly loaded value.
func (n *Namespace) newEntry(val []byte, origin int64, cost time.Duration, negative bool, lt *Lifetime) meta {
	softTTL, ttl := n.p.SoftTTL, n.p.TTL
	var sie time.Duration
	ownSIE := false
	if lt != nil && !negative {
		var clamped bool
		softTTL, ttl, sie, ownSIE, clamped = n.bounded(*lt)
		n.ctr.inc(evLifetimeSet)
		if clamped {
			n.ctr.inc(evLifetimeClamped)
		}
	}
	soft, hard := origin+int64(softTTL), origin+int64(ttl)
	if negative {
		soft = origin + int64(n.p.NegativeTTL)
		hard = soft
	} else if j := n.p.EarlyRefresh.Jitter; j > 0 {
		soft -= int64(float64(softTTL) * j * rand.Float64())
	}
	e := tier.Entry{Value: val, Origin: time.Unix(0, origin), Soft: time.Unix(0, soft), Hard: time.Unix(0, hard), LoadCost: cost, Negative: negative}
	if ownSIE {
		e.Stale = time.Unix(0, hard+int64(sie))
	}
	raw := tier.AppendEntry(make([]byte, 0, tier.EncodedSize(e)), e)
	m, _ := decodeMeta(raw) // cannot fail: just encoded
	return m
}

// storeLocal copies an entry read from the shared tier into this process's
// tiers, unless the key was invalidated after the flight began.
func (n *Namespace) storeLocal(f *flight, key string, m *meta, now int64) {
	if !f.beginStore() {
		n.keepAsFallback(key, m)
		f.endStore()
		n.ctr.inc(evDroppedStaleSet)
		return
	}
	n.putLocal(key, m, now)
	f.endStore()
}

func (n *Namespace) putLocal(key string, m *meta, now int64) {
	// The envelope as allocated: its capacity, rounded up as the
	// allocator does (a 16 KiB value in its 40-byte envelope takes 18 KiB).
	held := local.SizeClass(cap(m.raw))
	n.putHot(key, m, held, now, now)
	if n.lkg != nil {
		// Only a newer load replaces what last-known-good holds: copies
		// of a key in the shared tier can hold different loads of it (a
		// replica behind its primary, a hot key's copy written before
		// the key was loaded again), and the older one's stale-if-error
		// window ends sooner. A shared-tier hit of the value it already
		// holds, the common case, costs a lookup, not a write (and keeps
		// the version it was loaded under, which a hit does not know).
		// This process's own invalidations delete the entry first.
		old := n.lkg.Get(key, now)
		switch {
		case old != nil && m.origin == old.origin && m.current > old.currentAt() &&
			(old.currentAt() < n.c.stream.resumedAt.Load() || m.current-old.currentAt() >= int64(n.p.Hot.TTL)/2):
			// The same load, found current again after a gap in the
			// invalidation stream, or half a Hot.TTL after it last was:
			// it may answer for a busy node again (spareBusyNode), which
			// takes copies found current within Hot.TTL. Written only
			// then, so a hit still costs a lookup.
			d := *old
			d.current = m.current
			n.lkg.Set(key, d, local.SizeClass(cap(d.raw)), n.staleUntil(&d), now)
		case old != nil && m.origin <= old.origin:
		case m.NotFound:
			n.lkg.Delete(key)
		default:
			n.lkg.Set(key, *m, held, n.staleUntil(m), now)
		}
	}
}

// putHot puts m, held bytes, in the hot tier if key may enter it now, for
// Hot.TTL from found, when m was found current.
func (n *Namespace) putHot(key string, m *meta, held, found, now int64) {
	// A copy found current before the stream was last heard again may
	// have missed an invalidation in the gap (stream.go).
	if n.hot != nil && !n.hotOff.Load() && m.currentAt() >= n.c.stream.resumedAt.Load() && n.admitHot(key, now) {
		// Never past the soft time: a hot-tier hit is always fresh.
		if exp := min(found+int64(n.p.Hot.TTL), m.soft); exp > now {
			hm := *m
			hm.Source = SourceHot
			n.hot.Set(key, hm, held, exp, now)
			// Set after the pass that drops such copies began.
			if m.currentAt() < n.c.stream.resumedAt.Load() {
				n.hot.Delete(key)
			}
		}
	}
}

// keepAsFallback keeps the value of a flight that an invalidation overtook
// (f.storeMu is held) in last-known-good when its watermark leaves it a
// fallback (another process's invalidation only): a failed load within its
// stale-if-error window gets it, as it gets a copy such an invalidation
// found there. Its readers were served it, and it may well be the value the
// invalidation announced (a load that read the source after the write):
// dropping it turned a database failure into errors for a key this process
// had just loaded. A newer copy there is kept.
//
// An announcement stamped before the load began, heard while it ran,
// leaves the value graded current, though the load may have read the
// source before the write (the two processes' clocks differ): the key's
// watermark is raised to the value's origin, so that it is a fallback like
// the others, rather than dropped: dropped, it would leave the key no
// stale value to serve once the copy before it ran out of its window.
func (n *Namespace) keepAsFallback(key string, m *meta) {
	if n.lkg == nil || m.NotFound {
		return
	}
	now := n.exactNow()
	switch n.grade(key, m, now) {
	case gradeNone:
		return
	case gradeCurrent:
		n.raiseMark(key, watermark{other: m.origin})
	}
	if old := n.lkg.Get(key, now); old == nil || old.origin < m.origin {
		n.lkg.Set(key, *m, local.SizeClass(cap(m.raw)), n.staleUntil(m), now)
	}
}

// admitHot reports whether key may enter the hot tier now.
func (n *Namespace) admitHot(key string, now int64) bool {
	if n.hotDetected && !n.isHot(key, now) {
		return false
	}
	return n.p.Hot.Admit == nil || n.p.Hot.Admit(key)
}
