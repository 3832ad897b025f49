package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/tier"
)

// The Tier is a tier.Coordinator: processes coordinate through it with
// per-key versions (the stale-set guard) and per-key leases.
//
// A key K's version lives in a sibling key, and its lease in another, both in
// K's Cluster hash slot so that one Lua script can touch K and its version
// atomically: for a key without a hash tag the siblings are "{K}:v" and
// "{K}:lease" (whose tag is K itself); for a key with a tag, K+":v" and
// K+":lease" keep the tag. A hot key's registry of copies, "{K}:c" or
// K+":c", is a third sibling (smear.go).
//
// The guarantee, for a caller that invalidates a key after the source of
// truth changed: once Invalidate has returned nil, no value read from the
// source before the invalidation is stored in Redis afterwards, by any
// process, because every write is SetIfVersion with the version read before
// the source was, and the invalidation bumped it; nor does any copy of the
// key read before it survive it (smear.go). Processes' own in-memory
// copies are outside Redis; the Cache bounds them by the hot tier's TTL
// (never past a value's soft time) in other processes and drops them at once
// in the invalidating one.
var _ tier.Coordinator = (*Tier)(nil)

// versionTTL is how long a key's version outlives its last invalidation. A
// version that expires reads as 0 again; a load that read the old version
// then has its write refused, which is safe. It only needs to exceed any
// load's duration; an hour keeps memory bounded for keys invalidated once.
const versionTTL = time.Hour

var (
	// KEYS: value, version. ARGV: expected version, value, TTL in ms, and
	// "copy" for a hot key's copy (smear.go), whose version may be lower
	// than the key's but never higher.
	setIfVersionScript = newScript(`
local v = redis.call('GET', KEYS[2]) or '0'
if ARGV[4] == 'copy' then
  if tonumber(v) > tonumber(ARGV[1]) then return 0 end
elseif v ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`)
	// KEYS: value, version, registry of copies. ARGV: version TTL in ms,
	// the stream's channel and the announcement (stream.go). Returns the
	// new version and the copies the registry names, whose deletion the
	// caller sends next (smear.go). The registry is left to its TTL: an
	// invalidation repeated after a lost reply or a copy it could not
	// delete must find the same names again. The announcement goes out
	// with the version bump, atomically: no process hears of an
	// invalidation that did not happen, and none happens unannounced. A
	// PUBLISH the server refuses (an ACL without the channel) is returned
	// as the third value, not raised: the invalidation itself took place,
	// and must not be retried for ever; the refusal is logged.
	invalidateScript = newScript(`
redis.call('DEL', KEYS[1])
local v = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
local p = redis.pcall('PUBLISH', ARGV[2], ARGV[3])
local perr = ''
if type(p) == 'table' and p.err then perr = p.err end
return {v, redis.call('SMEMBERS', KEYS[3]), perr}`)
	// KEYS: value, version. ARGV: value, TTL in ms, and the value it may
	// replace ("" for none: no envelope is empty). Returns {1} when it
	// wrote, {0} when the key has a version (an invalidation this server
	// remembers), {2, held} when the key holds another value: a
	// write-back (tier.Refiller) never replaces a value but the older load
	// the caller read (tier.OverRefiller), and never lands on a key
	// invalidated since the server lost its data.
	refillScript = newScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return {0} end
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[3] then return {2, held} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}`)
	// KEYS: lease. ARGV: token.
	releaseScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

// sibling returns the key that sits beside full in its hash slot.
func sibling(full, suffix string) (string, error) {
	if i := strings.IndexByte(full, '{'); i >= 0 {
		if j := strings.IndexByte(full[i+1:], '}'); j > 0 {
			return full + suffix, nil // the tag still decides the slot
		}
	}
	if strings.ContainsAny(full, "{}") {
		return "", fmt.Errorf("key %q has braces but no hash tag, so no sibling key can share its slot", full)
	}
	return "{" + full + "}" + suffix, nil
}

// countSetFailure counts a failed write: skipped by the open breaker or
// an ejected primary, or failed.
func (t *Tier) countSetFailure(err error) {
	countFailure(err, &t.stats.setErrors, &t.stats.setBypassed, 1)
}

// Version implements tier.Coordinator.
func (d *tierDriver) Version(ctx context.Context, key string) (uint64, error) {
	t := (*Tier)(d)
	full, err := t.fullKey(key)
	if err != nil {
		return 0, fmt.Errorf("redis tier version %q: %w", key, err)
	}
	vk, err := sibling(full, ":v")
	if err != nil {
		return 0, fmt.Errorf("redis tier version %q: %w", key, err)
	}
	res := t.one(ctx, t.opts.ReadBudget, plainCommand(vk, func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(vk).Build() }))
	s, err := res.ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("redis tier version %q: %w", key, err)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis tier version %q: %q is not a version: %w", key, s, err)
	}
	return v, nil
}

// SetIfVersion implements tier.Coordinator.
func (d *tierDriver) SetIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	t := (*Tier)(d)
	c := &t.stats
	c.sets.add(1)
	full, err := t.checkItem(it)
	if err != nil {
		return false, err
	}
	vk, err := sibling(full, ":v")
	if err != nil {
		c.setErrors.add(1)
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	ms := strconv.FormatInt(pxMillis(it.TTL), 10)
	res := t.one(ctx, t.opts.WriteTimeout, setIfVersionScript.call([]string{full, vk}, strconv.FormatUint(version, 10), string(it.Value), ms))
	n, err := res.AsInt64()
	if err != nil {
		t.countSetFailure(err)
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	return n == 1, nil
}

var _ tier.Refiller = (*Tier)(nil)

// Refill implements tier.Refiller with one script on the key's primary,
// which checks the key's version and value and writes, atomically.
func (d *tierDriver) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	return d.refill(ctx, it, "")
}

var _ tier.OverRefiller = (*Tier)(nil)

// RefillOver implements tier.OverRefiller with Refill's script, which
// then also writes where the key holds exactly over.
func (d *tierDriver) RefillOver(ctx context.Context, it tier.Item, over []byte) (bool, []byte, error) {
	if len(over) == 0 {
		return false, nil, fmt.Errorf("redis tier refill %q: no value to replace", it.Key)
	}
	return d.refill(ctx, it, string(over))
}

// refill is Refill, replacing over when the key holds it ("" for never).
func (d *tierDriver) refill(ctx context.Context, it tier.Item, over string) (bool, []byte, error) {
	t := (*Tier)(d)
	c := &t.stats
	c.sets.add(1)
	full, err := t.checkItem(it)
	if err != nil {
		return false, nil, err
	}
	vk, err := sibling(full, ":v")
	if err != nil {
		c.setErrors.add(1)
		return false, nil, fmt.Errorf("redis tier refill %q: %w", it.Key, err)
	}
	ms := strconv.FormatInt(pxMillis(it.TTL), 10)
	res := t.one(ctx, t.opts.WriteTimeout, refillScript.call([]string{full, vk}, string(it.Value), ms, over))
	arr, err := res.ToArray()
	var code int64
	if err == nil && len(arr) == 0 {
		err = errors.New("refill answered no value")
	}
	if err == nil {
		code, err = arr[0].AsInt64()
	}
	if err != nil {
		t.countSetFailure(err)
		return false, nil, fmt.Errorf("redis tier refill %q: %w", it.Key, err)
	}
	switch {
	case code == 1:
		return true, nil, nil
	case code == 2 && len(arr) == 2:
		held, err := arr[1].AsBytes()
		if err != nil {
			return false, nil, fmt.Errorf("redis tier refill %q: %w", it.Key, err)
		}
		return false, held, nil
	}
	return false, nil, nil
}

// Invalidate implements tier.Coordinator: one script per key, pipelined.
func (d *tierDriver) Invalidate(ctx context.Context, keys ...string) error {
	t := (*Tier)(d)
	if len(keys) == 0 {
		return nil
	}
	c := &t.stats
	c.deletes.add(len(keys))
	var errs []error
	cmds := make([]command, 0, len(keys))
	names := make([]string, 0, len(keys))
	ttl := strconv.FormatInt(versionTTL.Milliseconds(), 10)
	at, origin := t.opts.Clock.Now(), tier.Origin(ctx)
	for _, k := range keys {
		full, err := t.fullKey(k)
		var vk, rk string
		if err == nil {
			vk, err = sibling(full, ":v")
			rk, _ = sibling(full, registrySuffix) // as vk
		}
		if err != nil {
			c.deleteErrors.add(1)
			errs = append(errs, fmt.Errorf("redis tier invalidate %q: %w", k, err))
			continue
		}
		msg := string(appendAnnouncement(nil, k, at, origin))
		cmds = append(cmds, invalidateScript.call([]string{full, vk, rk}, ttl, t.opts.Stream.Channel, msg))
		names = append(names, k)
	}
	if len(cmds) == 0 {
		return errors.Join(errs...)
	}
	// One WriteTimeout for the keys and their copies.
	wctx, cancel := context.WithTimeout(ctx, t.opts.WriteTimeout)
	defer cancel()
	results, err := t.toPrimaries(wctx, t.opts.WriteTimeout, cmds)
	if err != nil {
		countFailure(err, &c.deleteErrors, &c.delBypassed, len(cmds))
		return errors.Join(append(errs, fmt.Errorf("redis tier invalidate %d keys: %w", len(cmds), err))...)
	}
	var smeared []registry
	for i, r := range results {
		reg, err := t.invalidated(r)
		if err != nil {
			countFailure(err, &c.deleteErrors, &c.delBypassed, 1)
			errs = append(errs, fmt.Errorf("redis tier invalidate %q: %w", names[i], err))
			continue
		}
		if len(reg.copies) > 0 {
			reg.name = names[i]
			smeared = append(smeared, reg)
		}
	}
	// Only keys that had copies cost a second round trip. A key whose own
	// invalidation or a copy's failed is returned as failed and its
	// invalidation is repeated whole: its registry still names its copies.
	errs = append(errs, t.invalidateCopies(wctx, smeared)...)
	return errors.Join(errs...)
}

// invalidated parses invalidateScript's reply.
func (t *Tier) invalidated(r rueidis.RedisResult) (registry, error) {
	arr, err := r.ToArray()
	if err == nil && len(arr) != 3 {
		err = fmt.Errorf("invalidation answered %d values, want 3", len(arr))
	}
	if err != nil {
		return registry{}, err
	}
	var reg registry
	if reg.ver, err = arr[0].AsInt64(); err == nil {
		reg.copies, err = arr[1].AsStrSlice()
	}
	if perr, _ := arr[2].ToString(); perr != "" {
		t.stats.streamRefused.add(1)
		t.flog.failedAs("permission", fmt.Errorf("announcing an invalidation on channel %q (grant the user the channel, e.g. &%s*, and +publish +subscribe): %s", t.opts.Stream.Channel, t.opts.KeyPrefix, perr))
	}
	return reg, err
}

// Lease implements tier.Coordinator with SET NX PXAT.
func (d *tierDriver) Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	t := (*Tier)(d)
	full, err := t.fullKey(key)
	var lk string
	if err == nil {
		lk, err = sibling(full, ":lease")
	}
	if err != nil {
		return false, fmt.Errorf("redis tier lease %q: %w", key, err)
	}
	// The lease ends at an absolute time (PXAT), not ttl after the server
	// runs the command: a SET sent to a server that froze (SIGSTOP, a
	// long fork) runs when it wakes, seconds after this call gave up on
	// it, and with a relative TTL it would then hold the key for a whole
	// ttl on behalf of nobody, stalling every process's readers. With
	// PXAT it ends when it was meant to, or is never set. The price is
	// that the lease follows this host's clock: hosts off by more than a
	// few milliseconds shorten or lengthen leases by their skew.
	at := time.Now().UnixMilli() + pxMillis(ttl)
	res := t.one(ctx, t.opts.WriteTimeout, plainCommand(lk, func(b rueidis.Builder) rueidis.Completed {
		return b.Set().Key(lk).Value(token).Nx().PxatMillisecondsTimestamp(at).Build()
	}))
	err = res.Error()
	switch {
	case err == nil:
		return true, nil
	case rueidis.IsRedisNil(err):
		return false, nil // held by another process
	}
	return false, fmt.Errorf("redis tier lease %q: %w", key, err)
}

// Release implements tier.Coordinator.
func (d *tierDriver) Release(ctx context.Context, key, token string) error {
	t := (*Tier)(d)
	full, err := t.fullKey(key)
	var lk string
	if err == nil {
		lk, err = sibling(full, ":lease")
	}
	if err != nil {
		return fmt.Errorf("redis tier release %q: %w", key, err)
	}
	res := t.one(ctx, t.opts.WriteTimeout, releaseScript.call([]string{lk}, token))
	if err := res.Error(); err != nil {
		return fmt.Errorf("redis tier release %q: %w", key, err)
	}
	return nil
}
