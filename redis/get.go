package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Reads: GET for one key, one MGET per hash slot for many.

// Get reads one key. A nil reply is a miss (found false, err nil). The
// returned slice is a fresh copy the caller owns.
func (d *tierDriver) Get(ctx context.Context, key string) ([]byte, bool, error) {
	t := (*Tier)(d)
	c := &t.stats
	c.gets.add(1)
	full, err := t.fullKey(key)
	if err != nil {
		c.tooLarge.add(1)
		c.errors.add(1)
		return nil, false, fmt.Errorf("redis tier get %q: %w", key, err)
	}
	return t.getFull(ctx, key, full)
}

// getFull is Get of a key already qualified: key names it in errors, full
// is what is sent.
func (t *Tier) getFull(ctx context.Context, key, full string) ([]byte, bool, error) {
	gen, err := t.beginRead(ctx, key)
	if err != nil {
		return nil, false, err
	}
	if t.nodes != nil {
		return t.nodeGet(ctx, gen, key, full)
	}
	if rs := t.reps.Load(); rs != nil {
		return t.sentinelGet(ctx, rs, gen, key, full)
	}
	return t.primaryGet(ctx, gen, key, full)
}

// primaryGet is getFull on the standalone server, or a Sentinel group's
// primary.
func (t *Tier) primaryGet(ctx context.Context, gen uint64, key, full string) ([]byte, bool, error) {
	rctx, cancel := t.readContext(ctx)
	defer cancel()
	return t.primaryGetWithin(ctx, rctx, gen, key, full)
}

// primaryGetWithin is primaryGet within the read budget rctx, which a
// Sentinel read shares with the replica read before it.
func (t *Tier) primaryGetWithin(ctx, rctx context.Context, gen uint64, key, full string) ([]byte, bool, error) {
	res := t.primaryDo(ctx, rctx, gen, t.client.B().Get().Key(full).Build())
	// AsBytes aliases the reply's string instead of copying it: with
	// client-side caching off, each reply is a fresh allocation that nobody
	// else holds, and the Cache never modifies a value.
	return t.getResult(key, res)
}

// primaryRead sends the read cmd to the standalone server, or a Sentinel
// group's primary, under the read budget, and reports the outcome.
func (t *Tier) primaryRead(ctx context.Context, gen uint64, cmd rueidis.Completed) rueidis.RedisResult {
	rctx, cancel := t.readContext(ctx)
	defer cancel()
	return t.primaryDo(ctx, rctx, gen, cmd)
}

// primaryDo sends the read cmd to the primary within rctx and reports the
// outcome.
func (t *Tier) primaryDo(ctx, rctx context.Context, gen uint64, cmd rueidis.Completed) rueidis.RedisResult {
	var res rueidis.RedisResult
	if t.guarded() {
		res = guard(rctx, t, func() rueidis.RedisResult { return t.client.Do(rctx, cmd) }, rueidis.NewErrorResult)
	} else {
		res = t.client.Do(rctx, cmd)
	}
	t.end(ctx, gen, res.Error())
	return res
}

// beginRead is begin for a read of key, counting a refusal.
func (t *Tier) beginRead(ctx context.Context, key string) (uint64, error) {
	gen, err := t.beginReads(ctx)
	if err != nil {
		if errors.Is(err, tier.ErrBypassed) {
			t.stats.bypassed.add(1)
		} else {
			t.stats.errors.add(1)
		}
		return 0, fmt.Errorf("redis tier get %q: %w", key, err)
	}
	return gen, nil
}

// beginReads is begin for a read. While a timeout is being judged (the
// PING of confirm is out) a read is bypassed, as while the breaker is
// open, without telling the breaker: a read sent then to a frozen server
// would wait its whole budget, and one already did. Writes and deletes
// still go, so that an invalidation is not queued for a server that turns
// out to be only late.
func (t *Tier) beginReads(ctx context.Context) (uint64, error) {
	if t.judging.Load() {
		if t.closed.Load() {
			return 0, errClosed
		}
		return 0, tier.ErrBypassed
	}
	return t.begin(ctx)
}

// getResult turns one GET reply into the tier's tri-state answer and counts
// it: a hit, a miss (a nil reply, never an error), or a failure.
func (t *Tier) getResult(key string, res rueidis.RedisResult) ([]byte, bool, error) {
	c := &t.stats
	b, err := res.AsBytes()
	switch {
	case err == nil:
		c.hits.add(1)
		return b, true, nil
	case rueidis.IsRedisNil(err):
		c.misses.add(1)
		return nil, false, nil
	}
	c.errors.add(1)
	if isTimeout(err) {
		c.timeouts.add(1)
	}
	return nil, false, fmt.Errorf("redis tier get %q: %w", key, err)
}

// errorResults is n results failed with err.
func errorResults(n int, err error) []rueidis.RedisResult {
	rs := make([]rueidis.RedisResult, n)
	for i := range rs {
		rs[i] = rueidis.NewErrorResult(err)
	}
	return rs
}

// group is one multi-key command and the indexes of its keys in the call.
type group struct {
	keys []string // full keys, in command order
	idx  []int    // positions in the caller's slice
}

// groupBySlot splits keys (full keys; "" marks a refused key to skip) into
// groups a single multi-key command can carry: all keys of a standalone
// server in one group, one group per hash slot in a Cluster.
func (t *Tier) groupBySlot(keys []string) []group {
	if !t.cluster {
		g := group{keys: make([]string, 0, len(keys)), idx: make([]int, 0, len(keys))}
		for i, k := range keys {
			if k != "" {
				g.keys = append(g.keys, k)
				g.idx = append(g.idx, i)
			}
		}
		if len(g.keys) == 0 {
			return nil
		}
		return []group{g}
	}
	var groups []group
	bySlot := make(map[uint16]int)
	for i, k := range keys {
		if k == "" {
			continue
		}
		s := slot(k)
		gi, ok := bySlot[s]
		if !ok {
			gi = len(groups)
			bySlot[s] = gi
			groups = append(groups, group{})
		}
		groups[gi].keys = append(groups[gi].keys, k)
		groups[gi].idx = append(groups[gi].idx, i)
	}
	return groups
}

// GetMany reads keys with one MGET per hash slot, pipelined (a Sentinel
// group's replicas too: sentinelMGet). A key whose
// group failed has its own Lookup.Err; the returned error is non-nil only
// when no group got an answer (then every Lookup.Err is set as well).
func (d *tierDriver) GetMany(ctx context.Context, keys []string) ([]tier.Lookup, error) {
	t := (*Tier)(d)
	out := make([]tier.Lookup, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	c := &t.stats
	c.gets.add(len(keys))
	full := make([]string, len(keys))
	for i, k := range keys {
		f, err := t.fullKey(k)
		if err != nil {
			c.tooLarge.add(1)
			c.errors.add(1)
			out[i].Err = fmt.Errorf("redis tier get %q: %w", k, err)
			continue
		}
		full[i] = f
	}
	groups := t.groupBySlot(full)
	if len(groups) == 0 {
		return out, nil // every key refused; each has its error
	}
	sent := 0
	for _, g := range groups {
		sent += len(g.keys)
	}
	gen, err := t.beginReads(ctx)
	if err != nil {
		if errors.Is(err, tier.ErrBypassed) {
			c.bypassed.add(sent)
		} else {
			c.errors.add(sent)
		}
		err = fmt.Errorf("redis tier get %d keys: %w", len(keys), err)
		for _, g := range groups {
			for _, i := range g.idx {
				out[i].Err = err
			}
		}
		return out, err
	}

	rctx, cancel := context.WithTimeout(ctx, t.opts.ReadBudget)
	var results []rueidis.RedisResult
	var bypassed []bool
	var perKey [][]rueidis.RedisMessage // groups answered key by key (nodeMGet)
	var nodeOutcome breaker.Outcome
	var one [1][]rueidis.RedisMessage
	reported := false // the breaker was told already
	if t.nodes != nil {
		results, perKey, bypassed, nodeOutcome = t.nodeMGet(rctx, groups)
	} else if rs := t.reps.Load(); rs != nil {
		// One group: a Sentinel group is not a Cluster.
		var err error
		if n := rs.pickGroup(); n != nil {
			one[0], err = t.sentinelMGet(ctx, rctx, rs, n, gen, groups[0])
		} else {
			one[0], err = t.primaryMGet(ctx, rctx, gen, rs.primaryFor(0), groups[0].keys)
		}
		if err != nil {
			results = errorResults(1, err)
		} else {
			perKey = one[:]
		}
		reported = true
	} else if cmds := t.mgets(groups); t.guarded() {
		results = guard(rctx, t, func() []rueidis.RedisResult { return t.client.DoMulti(rctx, cmds...) },
			func(err error) []rueidis.RedisResult { return errorResults(len(cmds), err) })
	} else {
		results = t.client.DoMulti(rctx, cmds...)
	}
	cancel()

	var firstErr error
	failed := 0
	for gi, g := range groups {
		var arr []rueidis.RedisMessage
		var err error
		if perKey != nil && perKey[gi] != nil {
			arr = perKey[gi]
		} else {
			arr, err = results[gi].ToArray()
		}
		if err == nil && len(arr) != len(g.keys) {
			err = fmt.Errorf("MGET of %d keys answered %d values", len(g.keys), len(arr))
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			failed++
			if bypassed != nil && bypassed[gi] {
				c.bypassed.add(len(g.idx))
				for _, i := range g.idx {
					out[i].Err = fmt.Errorf("redis tier get %q: %w", keys[i], err)
				}
				continue
			}
			c.errors.add(len(g.idx))
			if isTimeout(err) {
				c.timeouts.add(len(g.idx))
			}
			for _, i := range g.idx {
				out[i].Err = fmt.Errorf("redis tier get %q: %w", keys[i], err)
			}
			continue
		}
		for j, i := range g.idx {
			if arr[j].IsNil() {
				c.misses.add(1)
				continue
			}
			s, err := arr[j].ToString()
			if err != nil {
				c.errors.add(1)
				out[i].Err = fmt.Errorf("redis tier get %q: %w", keys[i], err)
				continue
			}
			c.hits.add(1)
			out[i] = tier.Lookup{Value: []byte(s), Found: true}
		}
	}
	if t.nodes != nil {
		t.br.Done(gen, nodeOutcome)
	} else if !reported {
		t.end(ctx, gen, firstErr)
	}
	if failed == len(groups) {
		return out, fmt.Errorf("redis tier get %d keys: %w", len(keys), firstErr)
	}
	return out, nil
}

// mgets builds one MGET per group for rueidis's routing.
func (t *Tier) mgets(groups []group) rueidis.Commands {
	cmds := make(rueidis.Commands, len(groups))
	for gi, g := range groups {
		cmds[gi] = t.client.B().Mget().Key(g.keys...).Build()
	}
	return cmds
}
