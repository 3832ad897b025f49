package holdfast

import (
	"fmt"

	"github.com/holdfast-dev/holdfast/tier"
)

// What the shared tier can do beyond tier.Tier is found once, at New, by
// type:
// tier.Coordinator (versions for the stale-set guard, leases), tier.Refiller
// (write-backs from memory, refill.go), tier.Smearer (copies of
// hot keys), tier.HotSharer (a shared hot set), tier.InvalidationStream. A
// policy that needs a capability
// the tier lacks is an error from Cache.Namespace, never a silent downgrade
// of a guarantee the docs make.
//
// A tier that wraps another (for tracing or metrics, say) keeps the wrapped
// tier's capabilities in one of two ways, probed in this order:
//
//   - it implements the capability's interface itself, forwarding the calls
//     (it then sees them, as a slog.Handler wrapper sees every record);
//   - it has a method Unwrap() tier.Tier returning the tier it wraps (as
//     errors
//     do with Unwrap): the Cache then sends that capability's calls to the
//     first tier down the chain that has it, and only the tier.Tier calls (Get,
//     GetMany, Set, Delete) go through the wrapper.

// capabilities says what the shared tier can do for the Cache, and what a
// namespace uses (the capability.* measures of Stats).
type capabilities struct {
	// Versions: a tier.Coordinator's per-key versions. Loads write with a
	// compare-and-set on the version read before the source, so a value
	// read before an invalidation is never stored after it.
	Versions bool
	// Leases: a tier.Coordinator's per-key leases (Policy.Lease).
	Leases bool
	// Smearing: a tier.Smearer's copies of hot keys on several nodes.
	Smearing bool
	// HotSharing: a tier.HotSharer's hot set shared by every process
	// (Policy.Hot.Share).
	HotSharing bool
	// Stream: a tier.InvalidationStream's announcements of every
	// invalidation to every process, which drop their hot-tier copies.
	Stream bool
}

func (cp capabilities) String() string {
	return fmt.Sprintf("versions=%t leases=%t smearing=%t hot_sharing=%t stream=%t", cp.Versions, cp.Leases, cp.Smearing, cp.HotSharing, cp.Stream)
}

// tierCaps is the shared tier's capabilities, each the first tier down the
// Unwrap chain that has it.
type tierCaps struct {
	coord  tier.Coordinator
	refill tier.Refiller
	smear  tier.Smearer
	share  tier.HotSharer
	stream tier.InvalidationStream
	health tier.HealthReporter
	// vget is the shared tier itself when it is a tier.VersionedGetter and
	// the Coordinator: a wrapper sees every Get, and the version read with
	// a value is the one its SetIfVersion checks.
	vget tier.VersionedGetter
}

func probeTier(t tier.Tier) tierCaps {
	tc := tierCaps{
		coord:  probe[tier.Coordinator](t),
		refill: probe[tier.Refiller](t),
		smear:  probe[tier.Smearer](t),
		share:  probe[tier.HotSharer](t),
		stream: probe[tier.InvalidationStream](t),
		health: probe[tier.HealthReporter](t),
	}
	if vg, ok := t.(tier.VersionedGetter); ok && tc.coord != nil && tier.Coordinator(vg) == tc.coord {
		tc.vget = vg
	}
	return tc
}

// probe returns the first tier down t's Unwrap chain that implements I.
func probe[I any](t tier.Tier) I {
	for depth := 0; t != nil && depth < 16; depth++ {
		if x, ok := t.(I); ok {
			return x
		}
		u, ok := t.(interface{ Unwrap() tier.Tier })
		if !ok {
			break
		}
		t = u.Unwrap()
	}
	var zero I
	return zero
}

// capabilities returns what the shared tier can do for this Cache now; the
// zero value without one. Smearing follows the tier as it is connected: a
// lone Redis server smears nothing, and a tier that connects in the
// background does not before it has connected.
func (tc tierCaps) capabilities() capabilities {
	return capabilities{
		Versions:   tc.coord != nil,
		Leases:     tc.coord != nil,
		Smearing:   tc.smear != nil && tc.smear.Copies() > 1,
		HotSharing: tc.share != nil,
		Stream:     tc.stream != nil,
	}
}

// checkCapabilities reports what p needs that the shared tier cannot do.
func (c *Cache) checkCapabilities(p Policy) error {
	if c.opts.Shared == nil {
		if p.Lease.Enabled || p.Hot.Share {
			return fmt.Errorf("holdfast: Policy.Lease and Policy.Hot.Share need a shared tier")
		}
		return nil
	}
	have := c.caps.capabilities()
	missing := func(what, iface string) error {
		return fmt.Errorf("holdfast: %s needs a shared tier that implements holdfast.%s; %T does not (a wrapping tier keeps it by implementing it or by an Unwrap() tier.Tier method)", what, iface, c.opts.Shared)
	}
	switch {
	case p.Lease.Enabled && !have.Leases:
		return missing("Policy.Lease", "tier.Coordinator")
	case p.Hot.Share && !have.HotSharing:
		return missing("Policy.Hot.Share", "tier.HotSharer")
	case !have.Versions && !p.UnguardedWrites:
		return missing("the stale-set guard (or Policy.UnguardedWrites)", "tier.Coordinator")
	}
	return nil
}

// uses is what namespace n uses of the tier's capabilities.
func (n *Namespace) uses() capabilities {
	return capabilities{
		Versions:   n.coord != nil,
		Leases:     n.coord != nil && n.p.Lease.Enabled,
		Smearing:   n.smear != nil && n.smear.Copies() > 1,
		HotSharing: n.c.caps.share != nil && n.p.Hot.Share,
		Stream:     n.c.caps.stream != nil,
	}
}
