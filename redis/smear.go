package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
)

// Smearing hot keys in a Cluster (holdfast.Smearer).
//
// A key lives in one hash slot, so on one primary: a key every process reads
// thousands of times a second makes that primary (and its replicas) the
// cluster's bottleneck while the others idle (seed 004). The Cache tells the
// Tier which keys are hot; the Tier keeps ClusterOptions.HotCopies copies of
// each, the key itself included, every one on a different primary, and a read
// goes to one of them at random.
//
// Copy keys are "{<tag>#<s>}<key>", where tag is a hash of the key and s the
// smallest suffixes whose slots fall on primaries that hold neither the key
// nor another copy. A random suffix (seed 004's) can land two copies on one
// node; choosing from the slot map cannot. The choice depends only on which
// slots share a primary, so every process makes the same one, and it follows
// the map when slots move (the previous map's copies are invalidated too).
//
// Each copy has its own version key in its slot, like the key's. A copy is
// written only if its version is at most the version of the key read before
// the load, and Invalidate, after bumping the key's version to v, deletes
// every copy and raises each copy's version to at least v. So a value read
// from the source before an invalidation never lands in a copy after it
// (the stale-set guard, extended to copies: see coordinate.go), and a copy
// cannot outlive an invalidation that returned nil, whether or not any
// process still thinks the key hot. Invalidate therefore costs a second
// round trip, to the copies' primaries, for every key.

var _ holdfast.Smearer = (*Tier)(nil)

// invalidateCopyScript deletes a copy and raises its version.
// KEYS: copy, its version. ARGV: the key's new version, version TTL in ms.
var invalidateCopyScript = newScript(`
redis.call('DEL', KEYS[1])
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
if v < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1`)

// maxSuffixes bounds the search for copy suffixes. Each try lands on a
// given primary with probability about 1/primaries, so for any sane cluster
// the copies are found in a few dozen tries.
const maxSuffixes = 4096

// copyKeys returns the copies of full (not full itself) under the slot map
// slots with shards primaries: up to copies−1 keys, each on a primary that
// holds neither full nor another of them.
func copyKeys(slots *[slotCount]int16, shards int, full string, copies int) []string {
	want := min(copies, shards) - 1
	home := slots[slot(full)]
	if want <= 0 || home < 0 {
		return nil
	}
	var usedBuf [64]bool
	var used []bool
	if shards <= len(usedBuf) {
		used = usedBuf[:shards]
	} else {
		used = make([]bool, shards)
	}
	used[home] = true
	h := fnv.New32a()
	h.Write([]byte(full))
	tag := strconv.FormatUint(uint64(h.Sum32()), 16) + "#"
	out := make([]string, 0, want)
	for s := 0; len(out) < want && s < maxSuffixes; s++ {
		name := tag + strconv.Itoa(s)
		si := slots[slot(name)]
		if si < 0 || used[si] {
			continue
		}
		used[si] = true
		out = append(out, "{"+name+"}"+full)
	}
	return out
}

// copiesOf returns full's copies under the current slot map; with
// previous, also those under the last map that put slots on primaries
// differently, which may still hold values. Nil when the Tier does not smear.
func (t *Tier) copiesOf(full string, previous bool) []string {
	if t.nodes == nil || t.opts.Cluster.HotCopies <= 1 || len(full)+copyKeyOverhead > t.opts.MaxKeyBytes {
		return nil
	}
	tp := t.nodes.topo.Load()
	keys := copyKeys(&tp.slots, len(tp.shards), full, t.opts.Cluster.HotCopies)
	if previous && tp.prev != nil {
		for _, k := range copyKeys(&tp.prev.slots, tp.prev.shards, full, t.opts.Cluster.HotCopies) {
			if !contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Copies implements holdfast.Smearer: ClusterOptions.HotCopies for a
// Cluster with per-node health, else 1 (a single server has one node to
// read from, and rueidis's own routing gives no slot map to choose copies
// from).
func (t *Tier) Copies() int {
	if t.nodes == nil {
		return 1
	}
	return t.opts.Cluster.HotCopies
}

// copyKeyOverhead bounds what a copy key adds to its key: "{", eight hex
// digits, "#", up to four digits, "}".
const copyKeyOverhead = 1 + 8 + 1 + 4 + 1

// GetSmeared implements holdfast.Smearer: it reads one of key and its
// copies, chosen uniformly at random. A copy that misses (not written yet,
// or deleted) or whose node is ejected is answered by key itself; one that
// fails or runs out of the read budget is not, so a read never waits for
// two budgets.
func (t *Tier) GetSmeared(ctx context.Context, key string) ([]byte, bool, error) {
	full, err := t.fullKey(key)
	if err != nil {
		return t.Get(ctx, key)
	}
	copies := t.copiesOf(full, false)
	i := rand.IntN(len(copies) + 1)
	if i == len(copies) {
		return t.Get(ctx, key)
	}
	c := &t.stats
	c.gets.add(1)
	c.copyReads.add(1)
	v, found, err := t.getFull(ctx, key, copies[i])
	if found || (err != nil && !errors.Is(err, holdfast.ErrBypassed)) {
		return v, found, err
	}
	c.copyFallbacks.add(1)
	return t.getAndFill(ctx, key, full, copies[i])
}

// getAndFill reads key itself together with its version, in one MGET (they
// share a slot, so the pair is consistent), and fills copy, which missed,
// in the background. The fill is guarded by that version like any copy
// write, so a value read before an invalidation cannot be filled after it.
func (t *Tier) getAndFill(ctx context.Context, key, full, copy string) ([]byte, bool, error) {
	c := &t.stats
	c.gets.add(1)
	vk, err := sibling(full, ":v")
	if err != nil {
		return t.getFull(ctx, key, full)
	}
	gen, err := t.beginRead(ctx, key)
	if err != nil {
		return nil, false, err
	}
	res, err := t.nodeRead(ctx, gen, key, full, func(b rueidis.Builder) rueidis.Completed { return b.Mget().Key(full, vk).Build() })
	if err != nil {
		return nil, false, err
	}
	arr, err := res.ToArray()
	if err == nil && len(arr) != 2 {
		err = fmt.Errorf("MGET of 2 keys answered %d values", len(arr))
	}
	if err != nil {
		c.errors.add(1)
		if isTimeout(err) {
			c.timeouts.add(1)
		}
		return nil, false, fmt.Errorf("redis tier get %q: %w", key, err)
	}
	if arr[0].IsNil() {
		c.misses.add(1)
		return nil, false, nil
	}
	val, err := arr[0].ToString()
	if err != nil {
		c.errors.add(1)
		return nil, false, fmt.Errorf("redis tier get %q: %w", key, err)
	}
	c.hits.add(1)
	var ver uint64
	if !arr[1].IsNil() {
		s, _ := arr[1].ToString()
		if ver, err = strconv.ParseUint(s, 10, 64); err != nil {
			return []byte(val), true, nil // not a version: no fill
		}
	}
	t.fill(copy, val, ver)
	return []byte(val), true, nil
}

// fill writes value to copy on a goroutine the Tier owns, at most one per
// copy at a time, guarded by ver. A filled copy lives HotCopyTTL.
func (t *Tier) fill(copy, value string, ver uint64) {
	if _, busy := t.filling.LoadOrStore(copy, struct{}{}); busy {
		return
	}
	cmd := setIfVersionScript.call([]string{copy, copy + ":v"}, strconv.FormatUint(ver, 10), value, strconv.FormatInt(pxMillis(t.opts.Cluster.HotCopyTTL), 10), "copy")
	started := t.goOwned(func() {
		defer t.filling.Delete(copy)
		t.stats.copyFills.add(1)
		if err := t.one(context.Background(), t.opts.WriteTimeout, cmd).Error(); err != nil {
			t.countSetFailure(err)
		}
	})
	if !started {
		t.filling.Delete(copy)
	}
}

// SetSmearedIfVersion implements holdfast.Smearer: key and its copies in
// one pipeline, each guarded by its own version key.
func (t *Tier) SetSmearedIfVersion(ctx context.Context, it holdfast.Item, version uint64) (bool, error) {
	full, err := t.checkItem(it)
	if err != nil {
		t.stats.sets.add(1)
		return false, err
	}
	copies := t.copiesOf(full, false)
	if len(copies) == 0 {
		return t.SetIfVersion(ctx, it, version)
	}
	c := &t.stats
	c.sets.add(1 + len(copies))
	c.copyWrites.add(len(copies))
	vk, err := sibling(full, ":v")
	if err != nil {
		c.setErrors.add(1 + len(copies))
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	ver := strconv.FormatUint(version, 10)
	val := string(it.Value)
	ms := strconv.FormatInt(pxMillis(it.TTL), 10)
	cmds := make([]command, 0, 1+len(copies))
	cmds = append(cmds, setIfVersionScript.call([]string{full, vk}, ver, val, ms))
	for _, k := range copies {
		cmds = append(cmds, setIfVersionScript.call([]string{k, k + ":v"}, ver, val, ms, "copy"))
	}
	results, err := t.toPrimaries(ctx, t.opts.WriteTimeout, cmds)
	if err != nil {
		countFailure(err, &c.setErrors, &c.setBypassed, len(cmds))
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	var errs []error
	stored := false
	for i, r := range results {
		n, err := r.AsInt64()
		if err != nil {
			t.countSetFailure(err)
			errs = append(errs, fmt.Errorf("redis tier set %q (copy %d): %w", it.Key, i, err))
			continue
		}
		if i == 0 {
			stored = n == 1
		}
	}
	return stored, errors.Join(errs...)
}

// invalidateCopies deletes the copies of the keys whose versions were just
// raised to vers (full keys; names for errors), under the current and the
// previous slot map, and raises the copies' versions to match.
func (t *Tier) invalidateCopies(ctx context.Context, full, names []string, vers []int64) []error {
	var cmds []command
	var owner []int
	ttl := strconv.FormatInt(versionTTL.Milliseconds(), 10)
	for i, f := range full {
		for _, k := range t.copiesOf(f, true) {
			cmds = append(cmds, invalidateCopyScript.call([]string{k, k + ":v"}, strconv.FormatInt(vers[i], 10), ttl))
			owner = append(owner, i)
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	c := &t.stats
	c.copyDeletes.add(len(cmds))
	results, err := t.toPrimaries(ctx, t.opts.WriteTimeout, cmds)
	if err != nil {
		results = errorResults(len(cmds), err)
	}
	var errs []error
	for j, r := range results {
		if err := r.Error(); err != nil {
			countFailure(err, &c.deleteErrors, &c.delBypassed, 1)
			errs = append(errs, fmt.Errorf("redis tier invalidate %q: a copy: %w", names[owner[j]], err))
		}
	}
	return errs
}
