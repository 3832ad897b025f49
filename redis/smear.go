package redis

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/tier"
)

// Smearing hot keys in a Cluster (tier.Smearer).
//
// A key lives in one hash slot, so on one primary: a key every process reads
// thousands of times a second makes that primary (and its replicas) the
// cluster's bottleneck while the others idle. The Cache tells the Tier which
// keys are hot; the Tier keeps ClusterOptions.HotCopies copies of each, the
// key itself included, every one on a different primary, and a read goes to
// one of them at random.
//
// Copy keys are "<prefix>{<tag>#<s>}<rest>", for a key "<prefix><rest>"
// (prefix is Options.KeyPrefix, so an ACL limited to it covers the copies),
// where tag is a hash of the key and s the smallest suffixes whose slots
// fall on primaries that hold neither the key nor another copy. A random suffix can land two copies on one node;
// choosing from the slot map cannot. The choice depends only on which slots
// share a primary, so processes with the same map make the same one, and it
// follows the map when slots move.
//
// Processes' maps differ while slots move, so a copy's name is not something
// an invalidator can work out: every copy name is registered, before the copy
// is written, in a set beside the key (its registry, "{<key>}:c", in the
// key's slot), by a script that checks that the key's version is still the
// version read before the load; the registry lives at least as long as any
// copy it names. Each copy also has its own version key in its slot, like
// the key's, and is written only if its version is at most that same
// version. Invalidate's script deletes the key, bumps its version to v and
// reads the registry, atomically; the invalidator then deletes every copy it
// named and raises each copy's version to at least v. So, whatever each
// process's map: a copy registered before the invalidation is deleted by
// it, or finds its version raised and is not written; a copy whose
// registration comes after it finds the key's version changed and is
// neither registered nor written. The registry is never emptied, only left
// to expire: an invalidation that failed part way (a copy's node down, a
// slot moving, a reply lost after the script ran) is repeated whole and must
// find every name again, and removing names after the copies' deletes
// would race with a registration for the new version. A value read from the
// source before an invalidation therefore never lands in a copy after it
// (the stale-set guard, extended to copies: see coordinate.go), and no copy
// outlives an invalidation that returned nil, whether or not any process
// still thinks the key hot. Keys that were never smeared have an empty
// registry, and their Invalidate costs no second round trip.

var _ tier.Smearer = (*Tier)(nil)

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

// registrySuffix names a key's registry of copies: sibling(full,
// registrySuffix).
const registrySuffix = ":c"

// registrySlack is how much longer than the copies it names a registry
// lives: a copy is written after its registration, within a write's
// timeout, so its TTL starts a little later.
const registrySlack = time.Minute

// registerScript registers copy names in a key's registry if the key's
// version is still the one read before the load, and then, for
// SetSmearedIfVersion, sets the key itself. KEYS: version, registry[, value]. ARGV: expected version,
// registry TTL in ms, the number n of names, the n names[, value, its TTL
// in ms]. Returns 1 if it registered (and set), 0 if the version changed.
var registerScript = newScript(`
if (redis.call('GET', KEYS[1]) or '0') ~= ARGV[1] then return 0 end
local n = tonumber(ARGV[3])
if n > 0 then
  redis.call('SADD', KEYS[2], unpack(ARGV, 4, 3 + n))
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[4 + n], 'PX', ARGV[5 + n]) end
return 1`)

// register is the registerScript call that registers names under reg (a
// key's registry, beside its version vk) for copies living ttl, if the
// key's version is ver.
func register(vk, reg, ver string, ttl time.Duration, names []string) command {
	args := make([]string, 0, 3+len(names)+2)
	args = append(args, ver, strconv.FormatInt(pxMillis(ttl+registrySlack), 10), strconv.Itoa(len(names)))
	return registerScript.call([]string{vk, reg}, append(args, names...)...)
}

// registry is what Invalidate read from a key's registry.
type registry struct {
	name   string // the key, for errors
	ver    int64  // the key's version after the invalidation
	copies []string
}

// maxSuffixes bounds the search for copy suffixes. Each try lands on a
// given primary with probability about 1/primaries, so for any sane cluster
// the copies are found in a few dozen tries.
const maxSuffixes = 4096

// copyKeys returns the copies of full (not full itself) under the slot map
// slots with shards primaries: up to copies−1 keys, each on a primary that
// holds neither full nor another of them. full starts with prefix (the
// tier's KeyPrefix), and so does every copy: its hash tag goes right after
// the prefix, which has no braces, so the tag is the copy's first and
// decides its slot, and an ACL that limits the tier to its prefix
// (~prefix*) lets it write the copies.
func copyKeys(slots *[slotCount]int16, shards int, prefix, full string, copies int) []string {
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
		out = append(out, prefix+"{"+name+"}"+full[len(prefix):])
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
	keys := copyKeys(&tp.slots, len(tp.shards), t.opts.KeyPrefix, full, t.opts.Cluster.HotCopies)
	if previous && tp.prev != nil {
		for _, k := range copyKeys(&tp.prev.slots, tp.prev.shards, t.opts.KeyPrefix, full, t.opts.Cluster.HotCopies) {
			if !contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// Copies implements tier.Smearer: ClusterOptions.HotCopies for a
// Cluster with per-node health, else 1 (a single server has one node to
// read from, and rueidis's own routing gives no slot map to choose copies
// from).
func (d *tierDriver) Copies() int {
	t := (*Tier)(d)
	if t.nodes == nil {
		return 1
	}
	return t.opts.Cluster.HotCopies
}

// copyKeyOverhead bounds what a copy key adds to its key: "{", eight hex
// digits, "#", up to four digits, "}".
const copyKeyOverhead = 1 + 8 + 1 + 4 + 1

// GetSmeared implements tier.Smearer: it reads one of key and its
// copies, chosen uniformly at random. A copy that misses (not written yet,
// or deleted) or whose node is ejected is answered by key itself; one that
// fails or runs out of the read budget is not, so a read never waits for
// two budgets.
func (d *tierDriver) GetSmeared(ctx context.Context, key string) ([]byte, bool, error) {
	t := (*Tier)(d)
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
	if found || (err != nil && !errors.Is(err, tier.ErrBypassed)) {
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
	t.fill(full, copy, val, ver)
	return []byte(val), true, nil
}

// fill writes value to copy (a copy of full) on a goroutine the Tier owns,
// at most one per copy at a time, guarded by ver: first the copy's name is
// registered beside full if full's version is still ver, then the copy is
// written if its own version is at most ver. A filled copy lives
// HotCopyTTL.
func (t *Tier) fill(full, copy, value string, ver uint64) {
	vk, err := sibling(full, ":v")
	rk, _ := sibling(full, registrySuffix) // as vk
	if err != nil {
		return
	}
	if _, busy := t.filling.LoadOrStore(copy, struct{}{}); busy {
		return
	}
	v := strconv.FormatUint(ver, 10)
	ttl := t.opts.Cluster.HotCopyTTL
	reg := register(vk, rk, v, ttl, []string{copy})
	write := setIfVersionScript.call([]string{copy, copy + ":v"}, v, value, strconv.FormatInt(pxMillis(ttl), 10), "copy")
	started := t.goOwned(func() {
		defer t.filling.Delete(copy)
		t.stats.copyFills.add(1)
		ctx := context.Background()
		n, err := t.one(ctx, t.opts.WriteTimeout, reg).AsInt64()
		if err == nil && n == 1 {
			err = t.one(ctx, t.opts.WriteTimeout, write).Error()
		}
		if err != nil {
			t.countSetFailure(err)
		}
	})
	if !started {
		t.filling.Delete(copy)
	}
}

// SetSmearedIfVersion implements tier.Smearer: one script sets the key
// and registers its copies if the key's version is still version; then, if
// it did, the copies are written, each guarded by its own version key.
func (d *tierDriver) SetSmearedIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	t := (*Tier)(d)
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
	vk, err := sibling(full, ":v")
	rk, _ := sibling(full, registrySuffix) // as vk
	if err != nil {
		c.setErrors.add(1 + len(copies))
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	ver := strconv.FormatUint(version, 10)
	val := string(it.Value)
	ms := strconv.FormatInt(pxMillis(it.TTL), 10)
	set := register(vk, rk, ver, it.TTL, copies)
	set.keys = append(set.keys, full)
	set.args = append(set.args, val, ms)
	// One WriteTimeout for the key and its copies.
	ctx, cancel := context.WithTimeout(ctx, t.opts.WriteTimeout)
	defer cancel()
	n, err := t.one(ctx, t.opts.WriteTimeout, set).AsInt64()
	if err != nil {
		countFailure(err, &c.setErrors, &c.setBypassed, 1+len(copies))
		return false, fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	if n != 1 {
		return false, nil // the version changed: neither the key nor a copy written
	}
	c.copyWrites.add(len(copies))
	cmds := make([]command, len(copies))
	for i, k := range copies {
		cmds[i] = setIfVersionScript.call([]string{k, k + ":v"}, ver, val, ms, "copy")
	}
	return true, t.write(ctx, cmds, labels{op: "set", names: copies, failed: &c.setErrors, skipped: &c.setBypassed})
}

// invalidateCopies deletes the copies Invalidate read from the registries
// of regs and raises each copy's version to its key's new version. It
// returns an error for each copy it could not invalidate; the caller's
// invalidation is then repeated whole, and finds the copy in its registry
// again.
func (t *Tier) invalidateCopies(ctx context.Context, regs []registry) []error {
	var cmds []command
	var owner []int
	ttl := strconv.FormatInt(versionTTL.Milliseconds(), 10)
	for i, r := range regs {
		for _, k := range r.copies {
			cmds = append(cmds, invalidateCopyScript.call([]string{k, k + ":v"}, strconv.FormatInt(r.ver, 10), ttl))
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
			errs = append(errs, fmt.Errorf("redis tier invalidate %q: copy %s: %w", regs[owner[j]].name, cmds[j].key, err))
		}
	}
	return errs
}
