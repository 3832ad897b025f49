package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
)

// Read routing in Cluster mode. Each read goes to a node picked uniformly at
// random among its slot's primary and ready replicas that are not ejected
// (random, not latency-based: seed 002's 5-10x skew). Reads of a slot this
// Tier wrote within PrimaryAfterWrite go to the primary while it is
// eligible, so a process reads its own writes. When no node of the slot is
// eligible the read returns at once with an error wrapping
// holdfast.ErrBypassed: the Cache then serves its last-known-good value or
// loads, without waiting for a budget to run out. A MOVED or ASK reply (the
// map is behind the cluster) is followed through rueidis's Cluster client
// and refreshes the map at once.

// pick returns the node to read slot from. covered is false when the slot
// map has no node for the slot: the caller then uses rueidis's routing.
func (s *nodeSet) pick(sl uint16) (n *node, covered bool) {
	tp := s.topo.Load()
	si := tp.slots[sl]
	if si < 0 {
		return nil, false
	}
	nodes := tp.shards[si].nodes
	var buf [8]*node
	cand := buf[:0]
	for _, x := range nodes {
		if !x.ejected.Load() && x.ready.Load() {
			cand = append(cand, x)
		}
	}
	switch {
	case len(cand) == 0:
		return nil, true
	case cand[0] == nodes[0] && s.recentlyWritten(sl):
		return cand[0], true
	case len(cand) == 1:
		return cand[0], true
	}
	return cand[rand.IntN(len(cand))], true
}

// primaryFor returns the primary serving sl in the map, or nil.
func (s *nodeSet) primaryFor(sl uint16) *node {
	tp := s.topo.Load()
	if si := tp.slots[sl]; si >= 0 {
		return tp.shards[si].nodes[0]
	}
	return nil
}

func (s *nodeSet) sinceStart() int64 { return int64(time.Since(s.start)) + 1 }

func (s *nodeSet) wrote(sl uint16) {
	if s.o.PrimaryAfterWrite > 0 && sl < slotCount { // keyless commands have no slot
		s.written[sl].Store(s.sinceStart())
	}
}

func (s *nodeSet) recentlyWritten(sl uint16) bool {
	w := s.written[sl].Load()
	return w != 0 && time.Duration(s.sinceStart()-w) < s.o.PrimaryAfterWrite
}

// goOwned runs f on a goroutine the Tier owns: Close waits for it. It
// reports false, without running f, once the Tier is closed.
func (t *Tier) goOwned(f func()) bool {
	t.mu.RLock()
	if t.closed.Load() {
		t.mu.RUnlock()
		return false
	}
	t.wg.Add(1)
	t.mu.RUnlock()
	go func() {
		defer t.wg.Done()
		f()
	}()
	return true
}

// nodeGuarded reports whether a call to n runs under guard: n failed
// recently, or the tier's breaker is not closed. A bad node's reads are
// guarded; reads of healthy nodes keep the direct path.
func (t *Tier) nodeGuarded(n *node) bool {
	return n.suspect(t.opts.Clock) || t.br.State() != breaker.Closed
}

// isRedirect reports a MOVED or ASK reply.
func isRedirect(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	_, redirect := re.IsRedirect()
	return redirect
}

// nodeOutcome reports a node request's result to its node and returns the
// outcome for the tier's breaker. n nil means the request went through
// rueidis's routing and is the tier's alone.
func (t *Tier) nodeOutcome(ctx context.Context, n *node, err error) breaker.Outcome {
	o := outcome(ctx, err)
	if n == nil {
		if o == breaker.Failure {
			t.markSuspect()
		}
		return o
	}
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsLoading() {
		n.unready("loading")
	}
	switch o {
	case breaker.Ignore:
		return o
	case breaker.Success:
		t.nodes.report(n, false, false)
		return o
	}
	t.markSuspect()
	if t.nodes.report(n, true, isTimeout(err)) {
		return breaker.Failure
	}
	return breaker.Ignore
}

// markSuspect makes writes (which go through rueidis's routing) run under
// guard for a while after any failure.
func (t *Tier) markSuspect() {
	t.lastBad.Store(t.opts.Clock().UnixNano())
	t.suspect.Store(true)
}

// worse combines the outcomes of a call's parts for the tier's breaker.
func worse(a, b breaker.Outcome) breaker.Outcome {
	rank := func(o breaker.Outcome) int {
		switch o {
		case breaker.Failure:
			return 2
		case breaker.Success:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// nodeGet is Get in Cluster mode with per-node health; gen is the tier
// breaker's generation from begin.
func (t *Tier) nodeGet(ctx context.Context, gen uint64, key, full string) ([]byte, bool, error) {
	res, err := t.nodeRead(ctx, gen, key, full, func(b rueidis.Builder) rueidis.Completed { return b.Get().Key(full).Build() })
	if err != nil {
		return nil, false, err
	}
	return t.getResult(key, res)
}

// nodeRead sends the read command built by cmd, whose keys are all in
// full's slot, to a node picked for that slot, and reports the outcome to
// the node and to the tier's breaker. err is set, and nothing sent, when no
// node of the slot is eligible.
func (t *Tier) nodeRead(ctx context.Context, gen uint64, key, full string, cmd func(rueidis.Builder) rueidis.Completed) (_ rueidis.RedisResult, err error) {
	c := &t.stats
	sl := slot(full)
	n, covered := t.nodes.pick(sl)
	if n == nil && covered {
		t.br.Done(gen, breaker.Ignore)
		c.bypassed.add(1)
		return rueidis.RedisResult{}, fmt.Errorf("redis tier get %q: no node of slot %d is ready: %w", key, sl, holdfast.ErrBypassed)
	}
	rctx, cancel := t.readContext(ctx)
	defer cancel()
	var res rueidis.RedisResult
	o := breaker.Ignore
	if n != nil {
		n.requests.add(1)
		cmd := cmd(n.client.B())
		if t.nodeGuarded(n) {
			res = guard(rctx, t, func() rueidis.RedisResult { return n.client.Do(rctx, cmd) }, rueidis.NewErrorResult)
		} else {
			res = n.client.Do(rctx, cmd)
		}
		err := res.Error()
		if isRedirect(err) {
			t.nodes.report(n, false, false)
			t.nodes.kickTopology()
			n = nil
		} else {
			o = t.nodeOutcome(ctx, n, err)
			if err == nil || rueidis.IsRedisNil(err) {
				n.reads.add(1)
			}
		}
	}
	if n == nil {
		// Not in our map, or redirected: rueidis's Cluster routing.
		cmd := cmd(t.client.B())
		res = guard(rctx, t, func() rueidis.RedisResult { return t.client.Do(rctx, cmd) }, rueidis.NewErrorResult)
		o = worse(o, t.nodeOutcome(ctx, nil, res.Error()))
	}
	t.br.Done(gen, o)
	return res, nil
}

// nodeBatch is the MGETs of one GetMany that go to one node.
type nodeBatch struct {
	n    *node // nil: rueidis's Cluster routing
	gis  []int // group indexes
	cmds rueidis.Commands
	ch   chan []rueidis.RedisResult
}

// nodeMGet sends the groups of a GetMany, one batch per node, concurrently,
// and returns one result per group. Groups with no eligible node get an
// error wrapping holdfast.ErrBypassed and are not sent.
func (t *Tier) nodeMGet(ctx context.Context, groups []group) ([]rueidis.RedisResult, []bool, breaker.Outcome) {
	results := make([]rueidis.RedisResult, len(groups))
	bypassed := make([]bool, len(groups))
	var batches []*nodeBatch
	byNode := map[*node]*nodeBatch{}
	for gi, g := range groups {
		sl := slot(g.keys[0])
		n, covered := t.nodes.pick(sl)
		if n == nil && covered {
			bypassed[gi] = true
			results[gi] = rueidis.NewErrorResult(fmt.Errorf("no node of slot %d is ready: %w", sl, holdfast.ErrBypassed))
			continue
		}
		b := byNode[n]
		if b == nil {
			b = &nodeBatch{n: n, ch: make(chan []rueidis.RedisResult, 1)}
			byNode[n] = b
			batches = append(batches, b)
		}
		b.gis = append(b.gis, gi)
		if n == nil {
			b.cmds = append(b.cmds, t.client.B().Mget().Key(g.keys...).Build())
		} else {
			b.cmds = append(b.cmds, n.client.B().Mget().Key(g.keys...).Build())
		}
	}
	o := breaker.Ignore
	if len(batches) == 0 {
		return results, bypassed, o
	}
	send := func(b *nodeBatch) []rueidis.RedisResult {
		if b.n == nil {
			return t.client.DoMulti(ctx, b.cmds...)
		}
		return b.n.client.DoMulti(ctx, b.cmds...)
	}
	if len(batches) == 1 && batches[0].n != nil && !t.nodeGuarded(batches[0].n) {
		batches[0].ch <- send(batches[0])
	} else {
		for _, b := range batches {
			if !t.goOwned(func() { b.ch <- send(b) }) {
				b.ch <- errorResults(len(b.cmds), errClosed)
			}
		}
	}
	var redirected []int
	for _, b := range batches {
		var rs []rueidis.RedisResult
		select {
		case rs = <-b.ch:
		case <-ctx.Done():
			rs = errorResults(len(b.cmds), ctx.Err())
		}
		var firstErr error
		for j, gi := range b.gis {
			results[gi] = rs[j]
			err := rs[j].Error()
			if b.n != nil && isRedirect(err) {
				redirected = append(redirected, gi)
				continue
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if b.n != nil && err == nil {
				b.n.reads.add(len(groups[gi].keys))
			}
		}
		if b.n != nil {
			b.n.requests.add(len(b.cmds))
		}
		o = worse(o, t.nodeOutcome(ctx, b.n, firstErr))
	}
	if len(redirected) > 0 {
		t.nodes.kickTopology()
		cmds := make(rueidis.Commands, len(redirected))
		for i, gi := range redirected {
			cmds[i] = t.client.B().Mget().Key(groups[gi].keys...).Build()
		}
		rs := guard(ctx, t, func() []rueidis.RedisResult { return t.client.DoMulti(ctx, cmds...) },
			func(err error) []rueidis.RedisResult { return errorResults(len(cmds), err) })
		var firstErr error
		for i, gi := range redirected {
			results[gi] = rs[i]
			if err := rs[i].Error(); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		o = worse(o, t.nodeOutcome(ctx, nil, firstErr))
	}
	return results, bypassed, o
}

// noteWrites wraps the tier's Cluster client so that every write sent
// through it, the tier's own and any other code's (coordinate.go), marks
// its slot for PrimaryAfterWrite.
type noteWrites struct {
	rueidis.Client
	s *nodeSet
}

func (w noteWrites) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if !cmd.IsReadOnly() {
		w.s.wrote(cmd.Slot())
	}
	return w.Client.Do(ctx, cmd)
}

func (w noteWrites) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range multi {
		if !cmd.IsReadOnly() {
			w.s.wrote(cmd.Slot())
		}
	}
	return w.Client.DoMulti(ctx, multi...)
}

// writeOwners returns, for each write command's slot, the primary it goes
// to (nil when the map has none) and whether it is skipped because that
// primary is ejected.
func (s *nodeSet) writeOwners(slots []uint16) (owners []*node, skip []bool) {
	owners = make([]*node, len(slots))
	skip = make([]bool, len(slots))
	for i, sl := range slots {
		p := s.primaryFor(sl)
		owners[i] = p
		skip[i] = p != nil && p.ejected.Load()
	}
	return owners, skip
}
