package holdfast

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"

	"github.com/holdfast-dev/holdfast/internal/hotkey"
	"github.com/holdfast-dev/holdfast/internal/local"
	"github.com/holdfast-dev/holdfast/tier"
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
	// limit is this namespace's own cap (Policy.MaxConcurrentLoads), and
	// without one a limiter that never refuses: its slots in use are the
	// namespace's loads in flight (Stats).
	limit *limiter
	// reserved is the slots only this namespace's loads take, before the
	// Cache's (Policy.ReservedLoads), or nil.
	reserved *limiter
	ctr      *counters
	pending  pendingDeletes
	marks    watermarks
	coord    tier.Coordinator     // the shared tier, when it coordinates processes
	vget     tier.VersionedGetter // the shared tier, when it reads versions with values
	hotKeys  *hotkey.Detector     // non-nil with hotDetected or a shared tier
	// hotDetected is set when only the keys found hot enter the hot tier
	// (a positive Hot.Threshold); else every key read does.
	hotDetected bool
	smear       tier.Smearer // the shared tier, when it smears hot keys
	// sharedHot is the hot set every process published (Hot.Share).
	sharedHot atomic.Pointer[sharedHotSet]
	backoff   *local.Store[loadFailure] // keys whose last load failed (LoadErrorBackoff)
	// hotOff is set while the invalidation stream has gone unheard longer
	// than Hot.MaxUnheard: the hot tier was emptied and admits nothing.
	hotOff atomic.Bool
}

func newNamespace(c *Cache, name string, p Policy) *Namespace {
	n := &Namespace{
		c:        c,
		name:     name,
		prefix:   name + ":",
		p:        p,
		flights:  newFlightGroup(),
		limit:    newLimiter(cmp.Or(p.MaxConcurrentLoads, uncapped), c.opts.LoadWait),
		reserved: newLimiter(p.ReservedLoads, -1), // taken free or not at all
		ctr:      newCounters(),
	}
	n.marks.keep = n.pending.has
	// By default every key read enters the hot tier where no other process
	// can change a value behind this one's back: without a shared tier,
	// where the hot tier is the only cache, and with an invalidation
	// stream, which drops every process's copy within milliseconds of an
	// update (and the hot tier's copies after Hot.MaxUnheard while it is
	// not heard). Only a shared tier without a stream keeps the hot tier to
	// the keys found hot, whose copies nothing else bounds but Hot.TTL.
	if n.p.Hot.Threshold == 0 {
		n.p.Hot.Threshold = defaultHotThreshold
		if c.opts.Shared == nil || c.caps.stream != nil {
			n.p.Hot.Threshold = -1
		}
	}
	n.hotDetected = n.p.Hot.Threshold > 0
	n.coord, n.smear, n.vget = c.caps.coord, c.caps.smear, c.caps.vget
	if p.Hot.MaxBytes > 0 {
		n.hot = local.New[meta](p.Hot.MaxBytes)
		// The hot tier's window follows its hit rate; the hits are the
		// namespace's own count, which the read path keeps anyway.
		n.hot.AdaptWindow(func() uint64 { return n.ctr.sum(evHotHit) + n.ctr.sum(evHotRecheckHit) })
	}
	if (n.hot != nil && n.hotDetected) || c.opts.Shared != nil {
		// With a shared tier the keys found hot are reported (Stats.HotKeys)
		// even when every key enters the hot tier, and a smearing tier's
		// copies and the shared hot set follow them: at the default rate
		// then.
		at := n.p.Hot.Threshold
		if at <= 0 {
			at = defaultHotThreshold
		}
		n.hotKeys = hotkey.New(hotkey.Options{Threshold: at, HalfLife: p.Hot.HalfLife, TopK: p.Hot.TopK})
	}
	if p.LoadErrorBackoff > 0 {
		// 1 MiB of memory: an entry takes about 250 bytes of node and
		// map beside its key, so some 4,000 keys of up to 16 bytes.
		n.backoff = local.New[loadFailure](1 << 20)
	}
	// With a shared tier, last-known-good is what answers while the tier
	// fails, so that an outage costs one load per key per TTL and not one
	// per read, whatever the hot tier keeps. Without one, it is where a
	// value waits between its soft and hard time (the hot tier drops it at
	// soft), so stale-while-revalidate needs it.
	if size := p.LastKnownGoodBytes; p.StaleIfError > 0 || p.Lifetime.MaxStaleIfError > 0 || c.opts.Shared != nil || p.SoftTTL < p.TTL {
		if size == 0 {
			size = defaultLastKnownGoodBytes
		}
		n.lkg = local.New[meta](size)
	}
	return n
}

// Name returns the namespace's name.
func (n *Namespace) Name() string { return n.name }

// Policy returns the namespace's policy with defaults filled in.
func (n *Namespace) Policy() Policy { return n.p }

// Stats returns a snapshot of the namespace's measures.
func (n *Namespace) Stats() Stats {
	var s Stats
	for i := range statTable {
		st := &statTable[i]
		if st.level != nil {
			s.v[i] = st.level(n)
			continue
		}
		for _, e := range st.events {
			s.v[i] += n.ctr.sum(e)
		}
	}
	s.hot = n.hotKeyList()
	return s
}

// now is the time for the hot path (the coarse clock's word: see clock.go).
func (n *Namespace) now() int64 { return n.c.now() }

// exactNow is the time for the decisions of the miss path — is a value read
// from the shared tier or last-known-good fresh, stale or past hard — read
// from the clock itself: those paths cost microseconds anyway, and the
// coarse word can fall behind when a busy machine does not run its goroutine
// (values were judged fresh 150 ms past their soft time under load).
func (n *Namespace) exactNow() int64 { return n.c.clock.Now().UnixNano() }

// checkKey refuses a key over MaxKeyBytes. It inlines, and the error is
// built apart, so that no frame of its sits on every read's stack.
func (n *Namespace) checkKey(key string) error {
	if len(key) > n.p.MaxKeyBytes {
		return n.keyTooLarge(key)
	}
	return nil
}

// keyTooLarge counts and returns checkKey's error.
//
//go:noinline
func (n *Namespace) keyTooLarge(key string) error {
	n.ctr.inc(evTooLarge)
	return fmt.Errorf("holdfast: %s: key of %d bytes over the %d-byte limit: %w", n.name, len(key), n.p.MaxKeyBytes, ErrTooLarge)
}

// served turns a stored entry into a read's normal answer.
func (n *Namespace) served(m *meta, src Source) (Result, error) {
	if m.NotFound {
		return n.servedNegative(m, src)
	}
	res := m.Result // the answer the entry holds, under src's name
	res.Source = src
	return res, nil
}

// servedFor turns a stored entry into an answer given for why at now, the
// time the read judged it by: Stale when now is past its soft time.
func (n *Namespace) servedFor(m *meta, src Source, why Reason, now int64) (Result, error) {
	res, err := n.served(m, src)
	res.Reason, res.pastSoft = why, now >= m.soft
	return res, err
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
	if m.NotFound || m.costUsec == 0 {
		return false
	}
	u := 1 - rand.Float64() // (0, 1]
	early := float64(m.costUsec) * 1e3 * n.p.EarlyRefresh.XFetchBeta * -math.Log(u)
	return float64(now)+early >= float64(m.soft)
}

func (n *Namespace) countTierError(err error, ev event) {
	n.c.shared.failedAt.Store(n.exactNow())
	if errors.Is(err, tier.ErrBypassed) {
		n.ctr.inc(evSharedBypassed)
	} else {
		n.ctr.inc(ev)
	}
}

// smearing reports whether key is read from and written to the shared
// tier's copies: the tier smears and the key is hot now.
func (n *Namespace) smearing(key string) bool {
	return n.smear != nil && n.smear.Copies() > 1 && n.isHot(key, n.now())
}

// hotKeyList returns the namespace's hot keys now, fastest first, at most
// Hot.TopK; nil unless the namespace detects hot keys.
func (n *Namespace) hotKeyList() []HotKey {
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
