package holdfast

import (
	"context"
	"sync"
	"time"
)

// A loader often knows better than the namespace how long a value stays
// true: an upstream's Cache-Control, a product whose stock is nearly gone
// and should be read again soon. SetLifetime lets it say so, within the
// bounds the namespace sets (Policy.Lifetime); every tier follows, since a
// value's soft, hard and stale times travel in its envelope: the hot tier
// keeps it until its soft time at most, last-known-good and the shared tier
// until the end of its stale-if-error window.

// Lifetime is the lifetime a loader sets for one value (SetLifetime),
// counted, like the policy's, from when the load began.
type Lifetime struct {
	// TTL is the value's hard time to live. Required.
	TTL time.Duration
	// SoftTTL is how long it is fresh; 0 means TTL. A SoftTTL longer than
	// TTL is TTL.
	SoftTTL time.Duration
	// StaleIfError is how long past TTL the value may still be served when
	// fresh data cannot be had (Policy.StaleIfError, for this value alone):
	// 0 means the policy's, a negative window means none.
	StaleIfError time.Duration
}

// LifetimeBounds bounds the lifetimes loaders set in a namespace. A lifetime
// outside them is clamped into them and counted (Stats.LifetimesClamped).
type LifetimeBounds struct {
	// Min is the shortest TTL or SoftTTL a loader may set. Default 1 s: a
	// loader that set lifetimes near zero would turn every read into a
	// load.
	Min time.Duration
	// Max is the longest. Default the policy's TTL.
	Max time.Duration
	// MaxStaleIfError is the longest stale-if-error window a loader may
	// set. Default the policy's StaleIfError: a loader may shorten the
	// window, and lengthen it only as far as this allows.
	MaxStaleIfError time.Duration
}

// lifetimes is what the loader of one load call set, by key.
type lifetimes struct {
	keys []string // the keys of the call: a loader may set only those
	mu   sync.Mutex
	set  map[string]Lifetime
}

type lifetimesKey struct{}

// SetLifetime, called by a loader with the context it was given, sets the
// lifetime of the value it returns for key (any of the keys of a batch
// load). It reports false, and does nothing, when ctx is not a holdfast
// load's or key is not one of its keys. A later call for the same key
// replaces an earlier one; a loader that does not call it gets the
// policy's TTL and SoftTTL. Typed's loaders call it the same way.
func SetLifetime(ctx context.Context, key string, lt Lifetime) bool {
	l, _ := ctx.Value(lifetimesKey{}).(*lifetimes)
	if l == nil || lt.TTL <= 0 {
		return false
	}
	found := false
	for _, k := range l.keys {
		if k == key {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	l.mu.Lock()
	if l.set == nil {
		l.set = make(map[string]Lifetime, 1)
	}
	l.set[key] = lt
	l.mu.Unlock()
	return true
}

// lifetimeOf returns the lifetime the loader set for key, if any.
func (l *lifetimes) lifetimeOf(key string) (Lifetime, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lt, ok := l.set[key]
	return lt, ok
}

// bounded returns the soft and hard lifetimes and the stale-if-error window
// of a value whose loader set lt, clamped into the namespace's bounds, and
// whether it had to be. ownSIE is false when the loader left the window to
// the policy.
func (n *Namespace) bounded(lt Lifetime) (soft, hard, sie time.Duration, ownSIE, clamped bool) {
	b := n.p.Lifetime
	clamp := func(d, hi time.Duration) time.Duration {
		c := min(max(d, b.Min), hi)
		clamped = clamped || c != d
		return c
	}
	hard = clamp(lt.TTL, b.Max)
	soft = lt.SoftTTL
	if soft == 0 || soft > lt.TTL {
		soft = lt.TTL
	}
	soft = clamp(soft, hard)
	switch {
	case lt.StaleIfError < 0:
		ownSIE = true
	case lt.StaleIfError > 0:
		ownSIE = true
		sie = min(lt.StaleIfError, b.MaxStaleIfError)
		clamped = clamped || sie != lt.StaleIfError
	}
	return soft, hard, sie, ownSIE, clamped
}

// staleUntil is when m may no longer be served even as the fallback for a
// failed load: its own window's end, or its hard time plus the policy's
// StaleIfError.
func (n *Namespace) staleUntil(m *meta) int64 {
	if m.stale != 0 {
		return m.stale
	}
	return m.hard + int64(n.p.StaleIfError)
}
