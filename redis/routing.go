package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Read routing in Cluster mode. Each read goes to a node picked uniformly at
// random among its slot's primary and ready replicas that are not ejected
// (random, not latency-based: routing to the fastest node skewed the load
// five to ten times): over the node's READONLY connection when the map
// lists it as one of the slot's replicas, over its connection without
// READONLY (node.asPrimary) when the map lists it as the slot's primary.
// When no node of the slot is eligible the read returns at once with an
// error wrapping tier.ErrBypassed: the Cache then serves its
// last-known-good value or loads, without waiting for a budget to run out.
//
// Why a primary is never read over READONLY: a READONLY connection answers
// from whatever data the node holds, and the slot map and the readiness
// polls can each be a second old. After a failover (TAKEOVER above all) the
// demoted primary, still the primary in the map and still ready from its
// last poll, would answer from its old data (a resync can take seconds to
// begin), to every process, values deleted since. Without READONLY it
// answers MOVED, which is followed through rueidis's Cluster client
// (t.client) and refreshes the map. Only replica reads, whose staleness
// readiness bounds (readiness.go), use READONLY. The two connections cost
// the same: each node has both from the start, and a read is one command
// on either.
//
// A process reads its own writes and invalidations whatever the topology
// does: a slot this Tier wrote is read from the map's primary while the
// write is within PrimaryAfterWrite, and after that from nodes known to
// hold what their primary held after the write (node.currentAt): the
// primary once polled since, a replica once it reached an offset its
// primary had when polled since. While the map's primary is ejected, its
// replicas serve a written slot only under that condition; until then the
// read is bypassed.
//
// A MOVED or ASK reply (the map is behind the cluster: a slot moved, or is
// being migrated) is a healthy answer: it is reported to the node as a
// success, followed through t.client (which follows MOVED and sends ASKING
// for ASK itself) and refreshes the map at once. A replica never answers
// ASK: during a migration it answers nil for the keys already moved to the
// target, and a lagging replica for keys just written. So a miss from a
// replica is read again from the slot's primary. CLUSTERDOWN and TRYAGAIN
// are answers too: they never count against a node.

// pick returns the node to read slot sl from, and whether the read goes
// over its connection without READONLY (viaPrimary: n is the map's
// primary). covered is false when the map has no node for the slot: the
// caller then uses rueidis's routing alone.
func (s *nodeSet) pick(sl uint16) (n *node, viaPrimary, covered bool) {
	tp := s.topo.Load()
	si := tp.slots[sl]
	if si < 0 {
		return nil, false, false
	}
	n, viaPrimary = s.pickIn(tp.shards[si].nodes, s.written[sl].Load())
	return n, viaPrimary, true
}

// pickIn is pick among a shard's nodes (its primary first) for a slot this
// Tier last wrote at w (0: not written).
func (s *nodeSet) pickIn(nodes []*node, w int64) (n *node, viaPrimary bool) {
	p := nodes[0]
	if !p.wanted.Load() {
		p.wanted.Store(true) // its readiness is wanted: see nodeSet.pollShard
	}
	if s.recentlyWritten(w) && !p.ejected.Load() {
		return p, true
	}
	var buf [8]*node
	cand := buf[:0]
	now := int64(0)
	for _, x := range nodes {
		if x.ejected.Load() || !x.ready.Load() || (w != 0 && x.currentAt.Load() <= w) {
			continue
		}
		if x != p {
			// A replica of a shard not read lately has not been polled
			// since: it takes reads again after the round this read asks
			// for.
			if now == 0 {
				now = s.sinceStart()
			}
			if now >= x.freshUntil.Load() {
				continue
			}
		}
		cand = append(cand, x)
	}
	switch {
	case len(cand) == 0 && w != 0 && !p.ejected.Load():
		return p, true // no node known current since the write yet
	case len(cand) == 0:
		return nil, false
	case len(cand) == 1:
		n = cand[0]
	default:
		n = cand[rand.IntN(len(cand))]
	}
	return n, n == p
}

// primaryFor returns the primary serving sl in the map, or nil.
func (s *nodeSet) primaryFor(sl uint16) *node {
	tp := s.topo.Load()
	if si := tp.slots[sl]; si >= 0 {
		return tp.shards[si].nodes[0]
	}
	return nil
}

// sinceStart is the node set's clock for writes and polls: nanoseconds since
// it was created, monotonic, never 0.
func (s *nodeSet) sinceStart() int64 { return int64(time.Since(s.start)) + 1 }

// wrote records a write to slot sl, unless PrimaryAfterWrite is off. The
// write is recorded before it is sent and again when it is answered, so
// that a poll counts as newer than the write only if it was sent after the
// reply (see pick).
func (s *nodeSet) wrote(sl uint16) {
	if s.o.PrimaryAfterWrite > 0 && sl < slotCount { // keyless commands have no slot
		s.written[sl].Store(s.sinceStart())
	}
}

// recentlyWritten reports whether w, a slot's last write, is within
// PrimaryAfterWrite.
func (s *nodeSet) recentlyWritten(w int64) bool {
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

// closeOff runs close, which may wait on a server that has stopped
// answering (rueidis's Close waits up to a second a connection for a
// PING), on a goroutine the Tier owns; once the Tier is closed, here.
func (t *Tier) closeOff(close func()) {
	if !t.goOwned(close) {
		close()
	}
}

// nodeGuarded reports whether a call to n runs under guard: n failed
// recently, or the tier's breaker is not closed. A bad node's reads are
// guarded; reads of healthy nodes keep the direct path.
func (t *Tier) nodeGuarded(n *node) bool {
	return n.suspect(t.opts.Clock.Now) || t.br.State() != breaker.Closed
}

// isRedirect reports a MOVED or ASK reply, or TRYAGAIN (a multi-key
// command whose keys are split between the two nodes of a migration): the
// map is behind the cluster, and the command has to go elsewhere.
func isRedirect(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && (movedOrAsk(err) || re.IsTryAgain())
}

// clusterAnswer reports a reply by which a node says the cluster is
// changing under the request (MOVED, ASK, TRYAGAIN, CLUSTERDOWN): the node
// answered, so it is healthy, and the map needs a refresh.
func clusterAnswer(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && (re.IsClusterDown() || isRedirect(err))
}

// nodeOutcome reports a node request's result to its node and returns the
// outcome for the tier's breaker. n nil means the request went through
// rueidis's routing and is the tier's alone. A reply about the cluster's
// configuration (clusterAnswer) is a success for the node and the breaker
// alike, and refreshes the map.
func (t *Tier) nodeOutcome(ctx context.Context, n *node, err error) breaker.Outcome {
	if clusterAnswer(err) {
		if t.nodes != nil {
			t.nodes.kickTopology()
			if n != nil {
				t.nodes.report(n, false, false)
			}
		}
		return breaker.Success
	}
	o := outcome(ctx, err)
	if n == nil {
		if o == breaker.Failure {
			t.markSuspect(err)
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
		n.set.report(n, false, false)
		return o
	}
	t.markSuspect(err)
	if n.set.report(n, true, isTimeout(err)) {
		return breaker.Failure
	}
	return breaker.Ignore
}

// markSuspect makes writes (which go through rueidis's routing) run under
// guard for a while after any failure, err, which is logged if it is an
// error of configuration and is the reason Health gives while the breaker
// is open.
func (t *Tier) markSuspect(err error) {
	t.flog.failed(err)
	t.lastReason.Store(reasonOf(err))
	t.lastBad.Store(t.opts.Clock.Now().UnixNano())
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

// hasMiss reports a nil reply, or an array reply (MGET) with a nil in it.
func hasMiss(res rueidis.RedisResult) bool {
	err := res.Error()
	if rueidis.IsRedisNil(err) {
		return true
	}
	if err != nil {
		return false
	}
	arr, err := res.ToArray()
	return err == nil && slices.ContainsFunc(arr, func(m rueidis.RedisMessage) bool { return m.IsNil() })
}

// nodeRead sends the read command built by cmd, whose keys are all in
// full's slot, to a node picked for that slot, and reports the outcome to
// the node and to the tier's breaker. A miss from a replica is read again
// from the slot's primary, and a redirect through rueidis's routing (see
// the file comment). err is set, and nothing sent, when no node of the
// slot is eligible.
func (t *Tier) nodeRead(ctx context.Context, gen uint64, key, full string, cmd func(rueidis.Builder) rueidis.Completed) (_ rueidis.RedisResult, err error) {
	return t.nodeReadAs(ctx, gen, key, full, cmd, cmd, false)
}

// nodeReadAs is nodeRead that sends the command built by primaryCmd
// instead when the read goes to the slot's primary over the map (at once,
// or after a replica's miss); cmd goes to replicas and through rueidis's
// routing. With primaryFirst the read goes to the primary even when a
// replica would have been picked, unless the primary is ejected.
func (t *Tier) nodeReadAs(ctx context.Context, gen uint64, key, full string, cmd, primaryCmd func(rueidis.Builder) rueidis.Completed, primaryFirst bool) (_ rueidis.RedisResult, err error) {
	c := &t.stats
	sl := slot(full)
	n, viaPrimary, covered := t.nodes.pick(sl)
	if primaryFirst && n != nil && !viaPrimary {
		if p := t.nodes.primaryFor(sl); p != nil && !p.ejected.Load() {
			n, viaPrimary = p, true
		}
	}
	if n == nil && covered {
		t.br.Done(gen, breaker.Ignore)
		c.bypassed.add(1)
		return rueidis.RedisResult{}, fmt.Errorf("redis tier get %q: no node of slot %d is ready: %w", key, sl, tier.ErrBypassed)
	}
	rctx, cancel := t.readContext(ctx)
	defer cancel()
	var res rueidis.RedisResult
	o := breaker.Ignore
	if n != nil && !viaPrimary {
		res, o = t.readFrom(ctx, rctx, n, n.client, cmd)
		err := res.Error()
		switch p := t.nodes.primaryFor(sl); {
		case isRedirect(err):
			n = nil
		case p != n && p != nil && !p.ejected.Load() && hasMiss(res):
			n, viaPrimary = p, true // a replica's miss
		default:
			t.br.Done(gen, o)
			return res, nil
		}
	}
	if viaPrimary {
		var po breaker.Outcome
		res, po = t.readFrom(ctx, rctx, n, n.asPrimary, primaryCmd)
		o = worse(o, po)
		if !isRedirect(res.Error()) {
			t.br.Done(gen, o)
			return res, nil
		}
	}
	// Not in the map, or redirected: rueidis's Cluster routing, which
	// follows MOVED and ASK.
	built := cmd(t.client.B())
	res = guard(rctx, t, func() rueidis.RedisResult { return t.client.Do(rctx, built) }, rueidis.NewErrorResult)
	t.br.Done(gen, worse(o, t.nodeOutcome(ctx, nil, res.Error())))
	return res, nil
}

// readFrom sends the command built by cmd to n over c, one of n's clients,
// and reports the outcome to n; it returns the outcome for the tier's
// breaker.
func (t *Tier) readFrom(ctx, rctx context.Context, n *node, c rueidis.Client, cmd func(rueidis.Builder) rueidis.Completed) (rueidis.RedisResult, breaker.Outcome) {
	n.requests.add(1)
	tier.ReportNode(ctx, n.addr) // the last node asked is the one that answered
	built := cmd(c.B())
	res := t.callGuarded(rctx, n, func() rueidis.RedisResult { return c.Do(rctx, built) })
	err := res.Error()
	if err == nil || rueidis.IsRedisNil(err) {
		n.reads.add(1)
	}
	return res, t.nodeOutcome(ctx, n, err)
}

// callGuarded runs call, under guard when a call to n should be (see
// nodeGuarded).
func (t *Tier) callGuarded(ctx context.Context, n *node, call func() rueidis.RedisResult) rueidis.RedisResult {
	if t.nodeGuarded(n) {
		return guard(ctx, t, call, rueidis.NewErrorResult)
	}
	return call()
}

// nodeBatch is the MGETs of one GetMany that go to one node, or through the
// Cluster client.
type nodeBatch struct {
	n          *node // nil: rueidis's Cluster routing, not attributed
	viaPrimary bool  // over n's connection without READONLY
	gis        []int // group indexes
	cmds       rueidis.Commands
	ch         chan []rueidis.RedisResult
}

type batchKey struct {
	n          *node
	viaPrimary bool
}

// nodeMGet sends the groups of a GetMany, one batch per node, concurrently,
// and returns one result per group. Groups with no eligible node get an
// error wrapping tier.ErrBypassed and are not sent. A group that was
// redirected, or that a replica answered with misses, is read again key by
// key through the Cluster client (an MGET over keys split between the two
// nodes of a migration is refused with TRYAGAIN); its values are then in
// perKey[gi], in the group's key order, and results[gi] is to be ignored.
func (t *Tier) nodeMGet(ctx context.Context, groups []group) (results []rueidis.RedisResult, perKey [][]rueidis.RedisMessage, bypassed []bool, o breaker.Outcome) {
	results = make([]rueidis.RedisResult, len(groups))
	bypassed = make([]bool, len(groups))
	var batches []*nodeBatch
	byNode := map[batchKey]*nodeBatch{}
	for gi, g := range groups {
		sl := slot(g.keys[0])
		n, viaPrimary, covered := t.nodes.pick(sl)
		if n == nil && covered {
			bypassed[gi] = true
			results[gi] = rueidis.NewErrorResult(fmt.Errorf("no node of slot %d is ready: %w", sl, tier.ErrBypassed))
			continue
		}
		k := batchKey{n, viaPrimary}
		b := byNode[k]
		if b == nil {
			b = &nodeBatch{n: n, viaPrimary: viaPrimary, ch: make(chan []rueidis.RedisResult, 1)}
			byNode[k] = b
			batches = append(batches, b)
		}
		b.gis = append(b.gis, gi)
		b.cmds = append(b.cmds, b.client(t).B().Mget().Key(g.keys...).Build())
	}
	o = breaker.Ignore
	if len(batches) == 0 {
		return results, nil, bypassed, o
	}
	send := func(b *nodeBatch) []rueidis.RedisResult { return b.client(t).DoMulti(ctx, b.cmds...) }
	if len(batches) == 1 && batches[0].n != nil && !t.nodeGuarded(batches[0].n) {
		batches[0].ch <- send(batches[0])
	} else {
		for _, b := range batches {
			if !t.goOwned(func() { b.ch <- send(b) }) {
				b.ch <- errorResults(len(b.cmds), errClosed)
			}
		}
	}
	var again []recheck
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
			switch {
			case isRedirect(err):
				again = append(again, recheck{gi: gi})
				continue
			case err == nil && b.n != nil && !b.viaPrimary && hasMiss(rs[j]):
				if p := t.nodes.primaryFor(slot(groups[gi].keys[0])); p != b.n && p != nil && !p.ejected.Load() {
					again = append(again, recheck{gi: gi, owner: p})
				}
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
	if len(again) > 0 {
		perKey = make([][]rueidis.RedisMessage, len(groups))
		o = worse(o, t.readKeyByKey(ctx, groups, results, again, perKey))
	}
	return results, perKey, bypassed, o
}

// client is the rueidis client a batch is sent with.
func (b *nodeBatch) client(t *Tier) rueidis.Client {
	switch {
	case b.n == nil:
		return t.client
	case b.viaPrimary:
		return b.n.asPrimary
	}
	return b.n.client
}

// recheck is a GetMany group read again key by key: redirected (owner nil,
// the map is behind), or a replica's answer with misses (owner is the
// slot's primary, which is asked for the missing keys only).
type recheck struct {
	gi    int
	owner *node
}

// readKeyByKey reads the groups in again with one GET per key, pipelined
// through the Cluster client, which follows MOVED and ASK for each key on
// its own, and sets perKey for each group that got all its answers; a
// group with a failed GET gets that error in results. It returns the
// outcome for the tier's breaker.
func (t *Tier) readKeyByKey(ctx context.Context, groups []group, results []rueidis.RedisResult, again []recheck, perKey [][]rueidis.RedisMessage) breaker.Outcome {
	var cmds rueidis.Commands
	type sent struct{ gi, j int } // group, key index
	var at []sent
	for _, r := range again {
		var have []rueidis.RedisMessage
		if r.owner != nil {
			have, _ = results[r.gi].ToArray()
		}
		for j, k := range groups[r.gi].keys {
			if have == nil || have[j].IsNil() {
				cmds = append(cmds, t.client.B().Get().Key(k).Build())
				at = append(at, sent{r.gi, j})
			}
		}
		perKey[r.gi] = have
		if perKey[r.gi] == nil {
			perKey[r.gi] = make([]rueidis.RedisMessage, len(groups[r.gi].keys))
		}
	}
	rs := guard(ctx, t, func() []rueidis.RedisResult { return t.client.DoMulti(ctx, cmds...) },
		func(err error) []rueidis.RedisResult { return errorResults(len(cmds), err) })
	owners := map[int]*node{}
	firstErr := map[*node]error{} // per owner, nil included
	for _, r := range again {
		owners[r.gi] = r.owner
		firstErr[r.owner] = nil
	}
	for i, s := range at {
		owner := owners[s.gi]
		msg, err := rs[i].ToMessage()
		if err != nil && !rueidis.IsRedisNil(err) {
			if firstErr[owner] == nil {
				firstErr[owner] = err
			}
			if perKey[s.gi] != nil { // the group fails with its first error
				results[s.gi], perKey[s.gi] = rs[i], nil
			}
			continue
		}
		if perKey[s.gi] != nil {
			perKey[s.gi][s.j] = msg
		}
		if owner != nil {
			owner.reads.add(1)
		}
	}
	o := breaker.Ignore
	for n, err := range firstErr {
		if n != nil {
			n.requests.add(1)
		}
		o = worse(o, t.nodeOutcome(ctx, n, err))
	}
	return o
}

// noteWrites wraps the tier's Cluster client so that every write sent
// through it, the tier's own and any other code's (coordinate.go), marks
// its slot for PrimaryAfterWrite, before it is sent and again when it is
// answered (see wrote).
type noteWrites struct {
	rueidis.Client
	s *nodeSet
}

func (w noteWrites) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cmd.IsReadOnly() {
		return w.Client.Do(ctx, cmd)
	}
	sl := cmd.Slot() // rueidis may recycle cmd once answered
	w.s.wrote(sl)
	defer w.s.wrote(sl)
	return w.Client.Do(ctx, cmd)
}

func (w noteWrites) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	var slots []uint16
	for _, cmd := range multi {
		if !cmd.IsReadOnly() {
			slots = append(slots, cmd.Slot())
			w.s.wrote(cmd.Slot())
		}
	}
	defer func() {
		for _, sl := range slots {
			w.s.wrote(sl)
		}
	}()
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
