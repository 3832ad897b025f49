// Package redis is a holdfast.Tier over Redis 7, standalone or Cluster, built
// on github.com/redis/rueidis.
//
// Every call goes through a circuit breaker first. While Redis is healthy the
// breaker is closed and a Get is one GET, sent on rueidis's auto-pipelined
// connection with a deadline of ReadBudget (default 50 ms): rueidis stops
// waiting at the deadline and drops the late reply, so a frozen or
// unreachable Redis costs a read at most its budget. A nil reply is a miss,
// never a failure. Failures and timeouts feed the breaker; after 5 failures
// in a row, or half of at least 20 calls in 10 s, it opens and every call
// returns at once with an error wrapping holdfast.ErrBypassed, without
// touching Redis. After 1 s (doubling while Redis stays bad) a few probe
// calls go through; if they succeed the breaker closes. A call the caller
// cancels says nothing about Redis and is not counted; a reply from before
// the breaker last changed state is ignored.
//
// Keys: the Cache passes keys already qualified as "<namespace>:<key>", where
// a namespace never contains ':'; the tier prepends Options.KeyPrefix. So the
// Redis key is KeyPrefix + namespace + ":" + key, and two namespaces cannot
// collide. GetMany sends one MGET per Cluster hash slot (one MGET in all for
// a standalone server), pipelined together; Set pipelines one
// SET key value PX ttl per item.
//
// Client-side caching (RESP3 tracking) is off: the Cache has its own
// in-process hot tier with its own bounds, and a second, invisible one would
// make staleness impossible to reason about. rueidis's retries are off too:
// within a 50 ms budget a retry mostly spends the time the caller needs for
// its fallback, and the breaker has to see the failure.
//
// In a Redis Cluster each node also gets its own health (nodes.go): a node
// is ejected after 3 failures in a row (or half of its recent requests) and
// PINGed back on a jittered backoff from 250 ms to 10 s; a watchdog closes a
// connection that has had a request outstanding and no reply for 1 s;
// replicas are polled in the background for readiness (replication link up,
// no sync or load in progress, offset close to the primary's) and take
// reads only when ready; and each read goes to a node picked uniformly at
// random among its slot's primary and ready replicas. When none is left the
// read returns at once with an error wrapping holdfast.ErrBypassed, so the
// Cache falls back to last-known-good or its loader without waiting. A
// failing node counts against the tier's breaker only when no more nodes
// may be ejected, so one bad node never opens it for all. Every command for
// a slot's primary (writes, scripts, leases, version reads) is accounted to
// that primary the same way, and refused at once while it is ejected
// (toPrimaries). NodeStats reports each node. Options.Cluster tunes all of
// it; Disabled restores rueidis's own routing to primaries.
//
// rueidis honours a ctx deadline on an established, pipelined connection,
// but a call that has to reconnect can be held inside rueidis past it (the
// connection handshake, waiting for another call's dial, closing a failed
// connection). So after any failure, and while the breaker is not closed,
// reads run on a guard goroutine and the caller leaves at the budget
// whatever rueidis does; while Redis is healthy they call rueidis directly,
// because the guard costs about a quarter of the throughput. New opens
// rueidis's connections up front so that the first failure meets an
// established connection. Writes are guarded the same way, with
// WriteTimeout as their bound.
package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
)

// Tier is a holdfast.Tier backed by Redis. It is safe for concurrent use.
type Tier struct {
	client  rueidis.Client
	opts    Options
	cluster bool
	br      *breaker.Breaker
	nodes   *nodeSet // per-node health in Cluster mode; nil otherwise
	closed  atomic.Bool
	stats   counters

	// budgetSlot is the read context shared by uncancellable reads of the
	// current millisecond (see readContext).
	budgetSlot atomic.Pointer[budgetSlot]

	// suspect is set when a call fails and cleared by a success
	// SuspectFor after the last failure (lastBad, Clock's unix nanoseconds).
	// See guarded.
	suspect atomic.Bool
	lastBad atomic.Int64

	// filling holds the copy keys being filled now (smear.go).
	filling sync.Map

	// mu orders guard goroutines' wg.Add before Close's wg.Wait.
	mu sync.RWMutex
	wg sync.WaitGroup
}

// suspectFor is how long after its last failure Redis is read through
// guard. It matches the breaker's default window.
const suspectFor = 10 * time.Second

var _ holdfast.Tier = (*Tier)(nil)

// New validates opts, connects to Redis and detects whether it is a Cluster.
// It returns an error, and never panics, on invalid options or when no
// address answers within DialTimeout.
func New(opts Options) (*Tier, error) {
	o, bs, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	br, err := breaker.New(bs, o.Clock)
	if err != nil {
		return nil, fmt.Errorf("redis tier: %w", err)
	}
	co := rueidis.ClientOption{
		InitAddress:      o.Addrs,
		Username:         o.Username,
		Password:         o.Password,
		TLSConfig:        o.TLS,
		ConnWriteTimeout: o.ConnTimeout,
		DisableCache:     true,
		DisableRetry:     true,
		// Without it, a lone call runs synchronously on the connection with
		// the ctx deadline as a socket deadline: a caller's cancellation is
		// not seen until the budget runs out, and every budget timeout
		// closes the connection. Pipelined, a call waits on a channel and
		// leaves at ctx.Done (budget or cancellation) while the connection
		// stays up; a silent connection is closed by ConnTimeout's PINGs.
		AlwaysPipelining: true,
	}
	co.Dialer.Timeout = o.DialTimeout
	if !o.Cluster.Disabled {
		// Ignored by a standalone server. In a Cluster, rueidis's own slot
		// map (which writes use) follows failovers at this pace too.
		co.ClusterOption.ShardsRefreshInterval = o.Cluster.TopologyInterval
	}
	client, err := rueidis.NewClient(co)
	if err != nil {
		return nil, fmt.Errorf("redis tier: connect to %v: %w", o.Addrs, err)
	}
	t := &Tier{
		client:  client,
		opts:    o,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		br:      br,
	}
	if t.cluster && !o.Cluster.Disabled {
		if t.nodes, err = newNodeSet(t); err != nil {
			client.Close()
			return nil, err
		}
	}
	t.warm()
	return t, nil
}

// warm opens the connections rueidis would otherwise open lazily, so that
// a read that meets the first failure does so on an established connection,
// where rueidis honours the budget (see the package comment). rueidis
// spreads calls over its connections at random (4 per standalone server by
// default), so 32 PINGs miss one with a probability of about 1 in 2,500; a
// miss only costs that guarantee, and errors here are left to the reads.
func (t *Tier) warm() {
	ctx, cancel := context.WithTimeout(context.Background(), t.opts.DialTimeout)
	defer cancel()
	for i := 0; i < 32 && ctx.Err() == nil; i++ {
		_ = t.client.Do(ctx, t.client.B().Ping().Build()).Error()
	}
}

// Cluster reports whether the tier talks to a Redis Cluster.
func (t *Tier) Cluster() bool { return t.cluster }

// errClosed is returned by calls after Close.
var errClosed = fmt.Errorf("redis tier closed: %w", holdfast.ErrClosed)

// fullKey applies KeyPrefix and MaxKeyBytes.
func (t *Tier) fullKey(key string) (string, error) {
	if n := len(t.opts.KeyPrefix) + len(key); n > t.opts.MaxKeyBytes {
		return "", fmt.Errorf("key of %d bytes over MaxKeyBytes %d: %w", n, t.opts.MaxKeyBytes, holdfast.ErrTooLarge)
	}
	return t.opts.KeyPrefix + key, nil
}

// begin checks that a call may go to Redis: the tier is open, the caller has
// not given up already, and the breaker allows it. It returns the breaker
// generation the call must report to with end.
func (t *Tier) begin(ctx context.Context) (uint64, error) {
	if t.closed.Load() {
		return 0, errClosed
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent, so nothing is reported to the breaker.
		return 0, err
	}
	gen, ok := t.br.Allow()
	if !ok {
		return 0, holdfast.ErrBypassed
	}
	return gen, nil
}

// end reports the outcome of a call to the breaker. err is the first error
// from Redis (nil for success, a miss included); ctx is the caller's context.
func (t *Tier) end(ctx context.Context, gen uint64, err error) {
	o := outcome(ctx, err)
	if o == breaker.Failure {
		t.markSuspect()
	}
	t.settle(gen, o)
}

// settle reports o to the breaker; a success SuspectFor after the last
// failure ends the suspicion.
func (t *Tier) settle(gen uint64, o breaker.Outcome) {
	t.br.Done(gen, o)
	if o == breaker.Success && t.suspect.Load() &&
		time.Duration(t.opts.Clock().UnixNano()-t.lastBad.Load()) > suspectFor {
		t.suspect.Store(false)
	}
}

// guarded reports whether calls should run under guard. While Redis is
// healthy they do not: rueidis's pipelined calls leave at ctx.Done, and a
// guard goroutine per read costs about a quarter of the throughput
// (BenchmarkGetHit). After a failure, and while the breaker is not closed,
// they do: a call that has to reconnect to a frozen server can be held
// inside rueidis well past its ctx deadline (the connection handshake, the
// wait for another call's dial, closing a failed connection), and the guard
// returns at the budget regardless.
func (t *Tier) guarded() bool {
	return t.suspect.Load() || t.br.State() != breaker.Closed
}

// guard runs call on its own goroutine and waits for it until ctx is done;
// then it returns onDone(ctx.Err()) and leaves call to finish on its own,
// its late result dropped. The goroutine belongs to the Tier: call is bound
// by ctx (or by rueidis's own timeouts), and Close waits for it.
func guard[R any](ctx context.Context, t *Tier, call func() R, onDone func(error) R) R {
	t.mu.RLock()
	if t.closed.Load() {
		t.mu.RUnlock()
		return onDone(errClosed)
	}
	t.wg.Add(1)
	t.mu.RUnlock()
	ch := make(chan R, 1) // buffered: the goroutine never blocks on a caller that left
	go func() {
		defer t.wg.Done()
		ch <- call()
	}()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return onDone(ctx.Err())
	}
}

// outcome decides what a call's error says about Redis's health.
func outcome(ctx context.Context, err error) breaker.Outcome {
	switch {
	case err == nil || rueidis.IsRedisNil(err):
		return breaker.Success
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller cancelled: Redis may have been about to answer. Our
		// own budget shows up as DeadlineExceeded and does count.
		return breaker.Ignore
	}
	if re, ok := rueidis.IsRedisErr(err); ok && (strings.HasPrefix(re.Error(), "WRONGTYPE") || re.IsTryAgain()) {
		// Redis answered: the key holds something else (another writer's
		// data), or its slot is half migrated. That is a problem of the
		// key, not of the server.
		return breaker.Success
	}
	return breaker.Failure
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// Get reads one key. A nil reply is a miss (found false, err nil). The
// returned slice is a fresh copy the caller owns.
func (t *Tier) Get(ctx context.Context, key string) ([]byte, bool, error) {
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
	cmd := t.client.B().Get().Key(full).Build()
	rctx, cancel := t.readContext(ctx)
	var res rueidis.RedisResult
	if t.guarded() {
		res = guard(rctx, t, func() rueidis.RedisResult { return t.client.Do(rctx, cmd) }, rueidis.NewErrorResult)
	} else {
		res = t.client.Do(rctx, cmd)
	}
	cancel()
	// AsBytes aliases the reply's string instead of copying it: with
	// client-side caching off, each reply is a fresh allocation that nobody
	// else holds, and the Cache never modifies a value.
	t.end(ctx, gen, res.Error())
	return t.getResult(key, res)
}

// beginRead is begin for a read of key, counting a refusal.
func (t *Tier) beginRead(ctx context.Context, key string) (uint64, error) {
	gen, err := t.begin(ctx)
	if err != nil {
		if errors.Is(err, holdfast.ErrBypassed) {
			t.stats.bypassed.add(1)
		} else {
			t.stats.errors.add(1)
		}
		return 0, fmt.Errorf("redis tier get %q: %w", key, err)
	}
	return gen, nil
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

// GetMany reads keys with one MGET per hash slot, pipelined. A key whose
// group failed has its own Lookup.Err; the returned error is non-nil only
// when no group got an answer (then every Lookup.Err is set as well).
func (t *Tier) GetMany(ctx context.Context, keys []string) ([]holdfast.Lookup, error) {
	out := make([]holdfast.Lookup, len(keys))
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
	gen, err := t.begin(ctx)
	if err != nil {
		if errors.Is(err, holdfast.ErrBypassed) {
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
	if t.nodes != nil {
		results, perKey, bypassed, nodeOutcome = t.nodeMGet(rctx, groups)
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
		arr, err := results[gi].ToArray()
		if perKey != nil && perKey[gi] != nil {
			arr, err = perKey[gi], nil
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
			out[i] = holdfast.Lookup{Value: []byte(s), Found: true}
		}
	}
	if t.nodes != nil {
		t.br.Done(gen, nodeOutcome)
	} else {
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

// Set writes items with SET key value PX ttl, pipelined. Items that are too
// large or have no positive TTL are refused (nothing sent for them) and the
// rest are still written. The returned error joins the per-item errors.
func (t *Tier) Set(ctx context.Context, items ...holdfast.Item) error {
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
func (t *Tier) checkItem(it holdfast.Item) (string, error) {
	c := &t.stats
	full, err := t.fullKey(it.Key)
	if err == nil && len(it.Value) > t.opts.MaxValueBytes {
		err = fmt.Errorf("value of %d bytes over MaxValueBytes %d: %w", len(it.Value), t.opts.MaxValueBytes, holdfast.ErrTooLarge)
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
func (t *Tier) Delete(ctx context.Context, keys ...string) error {
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
// (an error wrapping holdfast.ErrBypassed: nothing was sent) or failed.
func countFailure(err error, failed, skipped *counter, n int) {
	if errors.Is(err, holdfast.ErrBypassed) {
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
// error wrapping holdfast.ErrBypassed; the rest go in one pipeline per
// primary, concurrently, so that a frozen primary costs the others
// nothing; and each primary's outcome goes to its health, which counts
// for the tier's breaker only when the node cannot be ejected. Without it
// (a standalone server, or Cluster.Disabled), the first failure goes to the
// tier's breaker.
//
// While Redis is suspect (guarded) or when the call spans primaries, each
// pipeline runs on a goroutine the Tier owns and the caller leaves at the
// deadline whatever rueidis does.
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
	if len(batches) == 1 && !t.guarded() {
		batches[0].ch <- send(cctx, t.client, batches[0].cmds)
	} else {
		for _, b := range batches {
			if !t.goOwned(func() { b.ch <- send(cctx, t.client, b.cmds) }) {
				b.ch <- errorResults(len(b.cmds), errClosed)
			}
		}
	}
	o := breaker.Ignore
	var first error // without per-node health
	for _, b := range batches {
		var rs []rueidis.RedisResult
		select {
		case rs = <-b.ch:
		case <-cctx.Done():
			rs = errorResults(len(b.cmds), cctx.Err())
		}
		for j, i := range b.idx {
			results[i] = rs[j]
		}
		// One outcome per primary per call: a pipeline that timed out on
		// a node is one failure of that node, not one per command.
		err := worstErr(ctx, rs)
		if t.nodes == nil {
			first = err
			continue
		}
		if b.n != nil {
			b.n.requests.add(len(b.cmds))
		}
		o = worse(o, t.nodeOutcome(ctx, b.n, err))
	}
	if t.nodes == nil {
		t.end(ctx, gen, first)
	} else {
		t.settle(gen, o)
	}
	return results, nil
}

// primaryBatch is the commands of one toPrimaries call that go to one
// primary.
type primaryBatch struct {
	n    *node // nil: no per-node health, or a slot the map lacks
	idx  []int // positions in the call
	cmds []command
	ch   chan []rueidis.RedisResult
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
			results[i] = rueidis.NewErrorResult(fmt.Errorf("primary %s ejected: %w", owners[i].addr, holdfast.ErrBypassed))
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

// Close closes the connections, which stops rueidis's goroutines and makes
// any call still inside rueidis return, and waits for the tier's guard
// goroutines. Calls after Close fail with an error wrapping
// holdfast.ErrClosed.
func (t *Tier) Close() error {
	t.mu.Lock()
	already := t.closed.Swap(true)
	t.mu.Unlock()
	if already {
		return nil
	}
	if t.nodes != nil {
		t.nodes.close()
	}
	t.client.Close()
	t.wg.Wait()
	return nil
}
