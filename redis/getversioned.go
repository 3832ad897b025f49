package redis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/tier"
)

// GetVersioned implements tier.VersionedGetter: a read that goes to the
// key's primary is one MGET of the key and its version (they share a slot),
// where a miss used to take a GET and then Version's GET. A replica is
// still sent a plain GET: its version may lag the primary's, and a nil
// version there would read as a miss to be asked again of the primary. A
// Sentinel group read from its replicas, and a read through rueidis's
// routing after a redirect, answer without the version.
func (d *tierDriver) GetVersioned(ctx context.Context, key string) tier.VersionedLookup {
	t := (*Tier)(d)
	full, err := t.fullKey(key)
	var vk string
	if err == nil {
		vk, err = sibling(full, ":v")
	}
	if err != nil || (t.nodes == nil && t.reps.Load() != nil) {
		v, found, err := d.Get(ctx, key)
		return tier.VersionedLookup{Lookup: tier.Lookup{Value: v, Found: found, Err: err}}
	}
	t.stats.gets.add(1)
	gen, err := t.beginRead(ctx, key)
	if err != nil {
		return tier.VersionedLookup{Lookup: tier.Lookup{Err: err}}
	}
	mget := func(b rueidis.Builder) rueidis.Completed { return b.Mget().Key(full, vk).Build() }
	var res rueidis.RedisResult
	if t.nodes != nil {
		get := func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(full).Build() }
		if res, err = t.nodeReadAs(ctx, gen, key, full, get, mget); err != nil {
			return tier.VersionedLookup{Lookup: tier.Lookup{Err: err}}
		}
	} else {
		res = t.primaryRead(ctx, gen, mget(t.client.B()))
	}
	return t.versionedResult(key, res)
}

// versionedResult is getResult for a reply that is either a GET's (no
// version) or the MGET of a key and its version.
func (t *Tier) versionedResult(key string, res rueidis.RedisResult) tier.VersionedLookup {
	arr, err := res.ToArray()
	if err != nil || len(arr) != 2 {
		v, found, err := t.getResult(key, res)
		return tier.VersionedLookup{Lookup: tier.Lookup{Value: v, Found: found, Err: err}}
	}
	var out tier.VersionedLookup
	switch s, err := arr[1].ToString(); {
	case arr[1].IsNil():
		out.Versioned = true // never invalidated: version 0
	case err == nil:
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			out.Version, out.Versioned = v, true
		}
	}
	c := &t.stats
	if arr[0].IsNil() {
		c.misses.add(1)
		return out
	}
	// AsBytes aliases the reply's string, as getResult's does.
	b, err := arr[0].AsBytes()
	if err != nil {
		c.errors.add(1)
		out.Err = fmt.Errorf("redis tier get %q: %w", key, err)
		out.Versioned = false
		return out
	}
	c.hits.add(1)
	out.Value, out.Found = b, true
	return out
}
