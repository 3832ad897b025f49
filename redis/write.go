package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Writes: every command for a slot's primary goes through toPrimaries,
// which accounts for each primary's health on its own.

// Set writes items with SET key value PX ttl, pipelined. Items that are too
// large or have no positive TTL are refused (nothing sent for them) and the
// rest are still written. The returned error joins the per-item errors.
func (d *tierDriver) Set(ctx context.Context, items ...tier.Item) error {
	t := (*Tier)(d)
	if len(items) == 0 {
		return nil
	}
	c := &t.stats
	c.sets.add(len(items))
	var errs []error
	cmds := make([]command, 0, len(items))
	keys := make([]string, 0, len(items))
	for _, it := range items {
		full, err := t.checkItem(it)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms := pxMillis(it.TTL)
		// string(it.Value) copies: the command may still be queued for
		// writing after Set returns on timeout, and the caller may reuse
		// its buffer by then.
		value := string(it.Value)
		cmds = append(cmds, plainCommand(full, func(b rueidis.Builder) rueidis.Completed {
			return b.Set().Key(full).Value(value).PxMilliseconds(ms).Build()
		}))
		keys = append(keys, it.Key)
	}
	if len(cmds) == 0 {
		return errors.Join(errs...)
	}
	err := t.write(ctx, cmds, labels{op: "set", names: keys, failed: &c.setErrors, skipped: &c.setBypassed})
	return errors.Join(append(errs, err)...)
}

// checkItem refuses an item that must not be sent, counting it, and
// returns its full key otherwise.
func (t *Tier) checkItem(it tier.Item) (string, error) {
	c := &t.stats
	full, err := t.fullKey(it.Key)
	if err == nil && len(it.Value) > t.opts.MaxStoredBytes {
		err = fmt.Errorf("value of %d bytes over MaxStoredBytes %d: %w", len(it.Value), t.opts.MaxStoredBytes, holdfast.ErrTooLarge)
	}
	if errors.Is(err, holdfast.ErrTooLarge) {
		c.tooLarge.add(1)
	}
	if err == nil && it.TTL <= 0 {
		// Never write without expiry: a value Redis keeps forever
		// outlives every staleness bound the Cache promises.
		err = fmt.Errorf("TTL %v is not positive", it.TTL)
	}
	if err != nil {
		c.setErrors.add(1)
		return "", fmt.Errorf("redis tier set %q: %w", it.Key, err)
	}
	return full, nil
}

// pxMillis is a TTL for PX, which has millisecond resolution: rounded up so
// that a short TTL never becomes 0 (an error in Redis).
func pxMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}

// Delete removes keys with one DEL per hash slot (one DEL in all for a
// standalone server), pipelined. Deleting a missing key is not an error.
func (d *tierDriver) Delete(ctx context.Context, keys ...string) error {
	t := (*Tier)(d)
	if len(keys) == 0 {
		return nil
	}
	c := &t.stats
	c.deletes.add(len(keys))
	var errs []error
	full := make([]string, len(keys))
	for i, k := range keys {
		f, err := t.fullKey(k)
		if err != nil {
			c.tooLarge.add(1)
			c.deleteErrors.add(1)
			errs = append(errs, fmt.Errorf("redis tier delete %q: %w", k, err))
			continue
		}
		full[i] = f
	}
	groups := t.groupBySlot(full)
	if len(groups) == 0 {
		return errors.Join(errs...)
	}
	cmds := make([]command, len(groups))
	names := make([]string, len(groups))
	weights := make([]int, len(groups))
	for gi, g := range groups {
		cmds[gi] = plainCommand(g.keys[0], func(b rueidis.Builder) rueidis.Completed { return b.Del().Key(g.keys...).Build() })
		names[gi] = strings.Join(g.keys, " ")
		weights[gi] = len(g.keys)
	}
	err := t.write(ctx, cmds, labels{op: "delete", names: names, weights: weights, failed: &c.deleteErrors, skipped: &c.delBypassed})
	return errors.Join(append(errs, err)...)
}

// labels name a write's commands in errors and count the keys each carries
// when it fails or is skipped.
type labels struct {
	op      string   // "set", "delete", ... in errors
	names   []string // one per command
	weights []int    // keys per command; nil: 1 each
	failed  *counter
	skipped *counter // skipped by the open breaker or an ejected primary
}

func (l labels) weight(i int) int {
	if l.weights == nil {
		return 1
	}
	return l.weights[i]
}

// write sends cmds (see toPrimaries) under WriteTimeout and returns the
// failed commands' errors, joined, counting each with l.
func (t *Tier) write(ctx context.Context, cmds []command, l labels) error {
	results, err := t.toPrimaries(ctx, t.opts.WriteTimeout, cmds)
	if err != nil {
		n := 0
		for i := range cmds {
			n += l.weight(i)
		}
		countFailure(err, l.failed, l.skipped, n)
		return fmt.Errorf("redis tier %s %d keys: %w", l.op, len(cmds), err)
	}
	var errs []error
	for i, r := range results {
		if err := r.Error(); err != nil {
			countFailure(err, l.failed, l.skipped, l.weight(i))
			errs = append(errs, fmt.Errorf("redis tier %s %q: %w", l.op, l.names[i], err))
		}
	}
	return errors.Join(errs...)
}

// countFailure counts n keys of a command that failed with err: skipped
// (an error wrapping tier.ErrBypassed: nothing was sent) or failed.
func countFailure(err error, failed, skipped *counter, n int) {
	if errors.Is(err, tier.ErrBypassed) {
		skipped.add(n)
	} else {
		failed.add(n)
	}
}

// toPrimaries is the one way a command reaches its slot's primary: writes,
// scripts, leases and version reads all go through it. It sends cmds
// through the breaker with a deadline of timeout, pipelined (see send for
// scripts and TRYAGAIN), and returns one result per command. err is set,
// and nothing sent, when the breaker or the tier refuses the whole call.
//
// With per-node health each command is attributed to its slot's primary in
// the map: a command whose primary is ejected is not sent and fails with an
// error wrapping tier.ErrBypassed; the rest go in one pipeline per
// primary, concurrently, so that a frozen primary costs the others
// nothing; and each primary's outcome goes to its health, which counts
// for the tier's breaker only when the node cannot be ejected. Without it
// (a standalone server, or Cluster.Disabled), the first failure goes to the
// tier's breaker.
//
// While its primary is suspect (batchGuarded) or when the call spans
// primaries, each pipeline runs on a goroutine the Tier owns and the caller
// leaves at the deadline whatever rueidis does.
func (t *Tier) toPrimaries(ctx context.Context, timeout time.Duration, cmds []command) ([]rueidis.RedisResult, error) {
	gen, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make([]rueidis.RedisResult, len(cmds))
	batches := t.byPrimary(cmds, results)
	if len(batches) == 0 {
		t.settle(gen, breaker.Ignore) // every primary ejected: nothing sent
		return results, nil
	}
	if len(batches) == 1 && !t.batchGuarded(batches[0]) {
		batches[0].ch <- t.sendBatch(cctx, batches[0])
	} else {
		for _, b := range batches {
			if !t.goOwned(func() { b.ch <- t.sendBatch(cctx, b) }) {
				b.ch <- errorResults(len(b.cmds), errClosed)
			}
		}
	}
	o := breaker.Ignore
	var first error // without per-node health
	for _, b := range batches {
		var rs []rueidis.RedisResult
		var rerouted []int // read only once sendBatch has answered
		select {
		case rs = <-b.ch:
			rerouted = b.rerouted
		case <-cctx.Done():
			rs = errorResults(len(b.cmds), cctx.Err())
		}
		for j, i := range b.idx {
			results[i] = rs[j]
		}
		if t.nodes == nil {
			first = worstErr(ctx, rs)
			continue
		}
		// One outcome per primary per call: a pipeline that timed out on
		// a node is one failure of that node, not one per command. What
		// went again through rueidis's routing after a redirect is the
		// tier's alone.
		nodeRs, routedRs := rs, []rueidis.RedisResult(nil)
		if len(rerouted) > 0 {
			nodeRs, routedRs = split(rs, rerouted)
		}
		if b.n != nil {
			b.n.requests.add(len(b.cmds))
		}
		o = worse(o, t.nodeOutcome(ctx, b.n, worstErr(ctx, nodeRs)))
		if routedRs != nil {
			o = worse(o, t.nodeOutcome(ctx, nil, worstErr(ctx, routedRs)))
		}
	}
	if t.nodes == nil {
		t.end(ctx, gen, first)
	} else {
		t.settle(gen, o)
	}
	return results, nil
}

// batchGuarded reports whether b's pipeline runs under guard. One sent to a
// node of the map is guarded as a read of that node is (nodeGuarded): its
// connection is the node's own, which another node's failure cannot hold
// up, so a timeout on one node no longer sends every write to every node
// through a goroutine of its own for suspectFor (in the lab's hot-zipf, a
// few read timeouts a minute did that to most of the run's writes). One
// through rueidis's routing is guarded while the whole tier is suspect.
func (t *Tier) batchGuarded(b *primaryBatch) bool {
	if b.n == nil {
		return t.guarded()
	}
	return t.nodeGuarded(b.n)
}

// primaryBatch is the commands of one toPrimaries call that go to one
// primary.
type primaryBatch struct {
	n    *node // nil: no per-node health, or a slot the map lacks
	idx  []int // positions in the call
	cmds []command
	ch   chan []rueidis.RedisResult

	// rerouted is set by sendBatch before it sends on ch: the positions
	// in cmds that n redirected and that went again through rueidis's
	// routing.
	rerouted []int
}

// sendBatch sends b's commands to b's primary over its connection without
// READONLY, so that writes go where the map that routes reads says: after
// a failover the Tier's map names the promoted replica within a
// TopologyInterval, while rueidis's Cluster client refreshes its own map
// only on its own errors and timer, and could keep sending writes to the
// dead primary after reads had moved on. Commands the node answers MOVED
// or ASK (the map is behind the cluster) go again through rueidis's
// Cluster client, which follows redirects, and the Tier's map is
// refreshed; a TRYAGAIN has had its retries in send already. Without a node (a
// standalone server, or a slot the map lacks) everything goes through
// rueidis's routing.
func (t *Tier) sendBatch(ctx context.Context, b *primaryBatch) []rueidis.RedisResult {
	if b.n == nil {
		return send(ctx, t.client, b.cmds)
	}
	rs := send(ctx, noteWrites{Client: b.n.asPrimary, s: t.nodes}, b.cmds)
	for i, r := range rs {
		if movedOrAsk(r.Error()) {
			b.rerouted = append(b.rerouted, i)
		}
	}
	if len(b.rerouted) == 0 {
		return rs
	}
	t.nodes.kickTopology()
	again := make([]command, len(b.rerouted))
	for j, i := range b.rerouted {
		again[j] = b.cmds[i]
	}
	// Under guard, as a read's redirect is: a redirect means the topology
	// changed, when rueidis's routing may hold a call past ctx while it
	// refreshes its map or dials the new owner.
	sent := guard(ctx, t, func() []rueidis.RedisResult { return send(ctx, t.client, again) },
		func(err error) []rueidis.RedisResult { return errorResults(len(again), err) })
	for j, r := range sent {
		rs[b.rerouted[j]] = r
	}
	return rs
}

// movedOrAsk reports a MOVED or ASK reply.
func movedOrAsk(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	_, moved := re.IsMoved()
	_, ask := re.IsAsk()
	return moved || ask
}

// split returns the results of rs not at the positions in at, and those
// at them.
func split(rs []rueidis.RedisResult, at []int) (rest, picked []rueidis.RedisResult) {
	for i, r := range rs {
		if slices.Contains(at, i) {
			picked = append(picked, r)
		} else {
			rest = append(rest, r)
		}
	}
	return rest, picked
}

// byPrimary splits cmds into one batch per primary, setting the results of
// commands whose primary is ejected, which are not sent.
func (t *Tier) byPrimary(cmds []command, results []rueidis.RedisResult) []*primaryBatch {
	if t.nodes == nil {
		b := &primaryBatch{idx: make([]int, len(cmds)), cmds: cmds, ch: make(chan []rueidis.RedisResult, 1)}
		for i := range b.idx {
			b.idx[i] = i
		}
		return []*primaryBatch{b}
	}
	slots := make([]uint16, len(cmds))
	for i, c := range cmds {
		slots[i] = slot(c.key)
	}
	owners, skip := t.nodes.writeOwners(slots)
	var batches []*primaryBatch
	byNode := map[*node]*primaryBatch{}
	for i, c := range cmds {
		if skip[i] {
			results[i] = rueidis.NewErrorResult(fmt.Errorf("primary %s ejected: %w", owners[i].addr, tier.ErrBypassed))
			continue
		}
		b := byNode[owners[i]]
		if b == nil {
			b = &primaryBatch{n: owners[i], ch: make(chan []rueidis.RedisResult, 1)}
			byNode[owners[i]] = b
			batches = append(batches, b)
		}
		b.idx = append(b.idx, i)
		b.cmds = append(b.cmds, c)
	}
	return batches
}

// worstErr is the error among rs that says the most against the node:
// the first that counts as a failure, else the first that is ignored (the
// caller cancelled), else nil.
func worstErr(ctx context.Context, rs []rueidis.RedisResult) error {
	var ignored error
	for _, r := range rs {
		err := r.Error()
		switch outcome(ctx, err) {
		case breaker.Failure:
			return err
		case breaker.Ignore:
			if ignored == nil {
				ignored = err
			}
		}
	}
	return ignored
}

// one sends cmd through toPrimaries with timeout.
func (t *Tier) one(ctx context.Context, timeout time.Duration, cmd command) rueidis.RedisResult {
	rs, err := t.toPrimaries(ctx, timeout, []command{cmd})
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	return rs[0]
}
