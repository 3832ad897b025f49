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
// value's soft and hard times travel in its envelope: the hot tier keeps it
// until its soft time at most, last-known-good and the shared tier until its
// hard time plus StaleIfError.

// Lifetime is the lifetime a loader sets for one value (SetLifetime),
// counted, like the policy's, from when the load began.
type Lifetime struct {
	// TTL is the value's hard time to live. Required.
	TTL time.Duration
	// SoftTTL is how long it is fresh; 0 means TTL. A SoftTTL longer than
	// TTL is TTL.
	SoftTTL time.Duration
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

// bounded returns the soft and hard lifetimes of a value whose loader set
// lt, clamped into the namespace's bounds, and whether it had to be.
func (n *Namespace) bounded(lt Lifetime) (soft, hard time.Duration, clamped bool) {
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
	return soft, hard, clamped
}
