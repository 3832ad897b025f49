package holdfast

import (
	"context"

	"github.com/holdfast-dev/holdfast/tier"
)

// Sharing hot keys between processes (Policy.Hot.Share, tier.HotSharer).
//
// Detection is per process, so each instance promotes a key only once it has
// seen enough reads of it itself; an instance that just started, or that the
// load balancer sends less traffic, reads the key from Redis meanwhile, and
// from the key's home node if it does not smear it. Every HotShareInterval
// each sharing namespace publishes the keys it finds hot and takes back the
// set every process published recently; a key in that set is treated as hot
// here too: admitted to the hot tier and smeared. A process publishes only
// what it detected itself, so a key nobody reads any more drops out of the
// set three intervals after its last reader stopped publishing it.

// sharedHotTTLFactor is how many intervals a published key stays in the set.
const sharedHotTTLFactor = 3

// shareHotKeys runs on a goroutine of the Cache's while the shared tier is
// a tier.HotSharer: one exchange per sharing namespace per interval.
func (c *Cache) shareHotKeys(sharer tier.HotSharer) {
	c.everyInterval(c.opts.HotShareInterval, func(ns *Namespace) {
		if ns.p.Hot.Share && ns.hotKeys != nil {
			ns.shareHot(c.ctx, sharer)
		}
	})
}

// shareHot publishes the namespace's hot keys and installs the shared set.
// A failure keeps the previous set until it would have expired anyway.
func (n *Namespace) shareHot(ctx context.Context, sharer tier.HotSharer) {
	interval := n.c.opts.HotShareInterval
	hot := n.hotKeys.Hot(n.now())
	keys := make([]string, len(hot))
	for i, h := range hot {
		keys[i] = h.Key
	}
	ctx, cancel := context.WithTimeout(ctx, interval)
	defer cancel()
	got, err := sharer.ShareHot(ctx, n.name, keys, sharedHotTTLFactor*interval, 2*n.p.Hot.TopK)
	now := n.now()
	if err != nil {
		n.countTierError(err, evSharedError)
		if old := n.sharedHot.Load(); old != nil && now >= old.until {
			n.sharedHot.Store(nil)
		}
		return
	}
	set := &sharedHotSet{keys: make(map[string]struct{}, len(got)), until: now + int64(sharedHotTTLFactor*interval)}
	for _, k := range got {
		set.keys[k] = struct{}{}
	}
	n.sharedHot.Store(set)
}

// sharedHotSet is the hot keys every sharing process published, as last
// fetched, and the time past which it is too old to use.
type sharedHotSet struct {
	keys  map[string]struct{}
	until int64
}

// sharedHotKey reports whether key is in the shared hot set.
func (n *Namespace) sharedHotKey(key string, now int64) bool {
	s := n.sharedHot.Load()
	if s == nil || now >= s.until {
		return false
	}
	_, ok := s.keys[key]
	return ok
}

// isHot reports whether key is hot here or in the shared set.
func (n *Namespace) isHot(key string, now int64) bool {
	return n.hotKeys.IsHot(key, now) || n.sharedHotKey(key, now)
}
