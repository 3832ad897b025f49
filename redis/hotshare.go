package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// The shared hot set (tier.HotSharer): one sorted set per namespace,
// each member a hot key scored by the Redis server's time, in ms, at which
// it stops being current. One script call publishes a process's hot keys,
// drops the expired ones, trims the set to maxSharedHot, and returns the
// most recent; the server's clock decides expiry, so processes' clocks need
// not agree. The set's name, ":hot:<namespace>", cannot be a Cache key:
// those are "<namespace>:<key>", and a namespace is never empty.

var _ tier.HotSharer = (*Tier)(nil)

// maxSharedHot bounds a shared hot set.
const maxSharedHot = 1024

// KEYS: the set. ARGV: TTL in ms, limit, cap, then the keys.
var shareHotScript = newScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local exp = now + tonumber(ARGV[1])
for i = 4, #ARGV do redis.call('ZADD', KEYS[1], exp, ARGV[i]) end
local n = redis.call('ZCARD', KEYS[1])
local cap = tonumber(ARGV[3])
if n > cap then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - cap - 1) end
if n > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)`)

// ShareHot implements tier.HotSharer.
func (d *tierDriver) ShareHot(ctx context.Context, set string, keys []string, ttl time.Duration, limit int) ([]string, error) {
	t := (*Tier)(d)
	name, err := t.fullKey(":hot:" + set)
	if err != nil {
		return nil, fmt.Errorf("redis tier share hot keys of %q: %w", set, err)
	}
	args := make([]string, 0, 3+len(keys))
	args = append(args, strconv.FormatInt(pxMillis(ttl), 10), strconv.Itoa(max(1, limit)), strconv.Itoa(maxSharedHot))
	args = append(args, keys...)
	res := t.one(ctx, t.opts.WriteTimeout, shareHotScript.call([]string{name}, args...))
	got, err := res.AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("redis tier share hot keys of %q: %w", set, err)
	}
	return got, nil
}
