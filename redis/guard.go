package redis

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Breaker plumbing shared by every call: begin and end a call under the
// tier's breaker, run it under a guard goroutine while Redis is suspect,
// and decide what an error says about Redis's health.

// suspectFor is how long after its last failure Redis is read through
// guard. It matches the breaker's default window.
const suspectFor = 10 * time.Second

// begin checks that a call may go to Redis: the tier is open, the caller has
// not given up already, and the breaker allows it. It returns the breaker
// generation the call must report to with end.
//
// A half-open breaker's probe is never a caller's call: a caller's read
// would wait up to the read budget on a server that may still be frozen.
// The probe is a PING on the tier's own goroutine instead, and the caller
// is bypassed as while the breaker was open (the Cache answers it from
// last-known-good, or loads).
func (t *Tier) begin(ctx context.Context) (uint64, error) {
	if t.closed.Load() {
		return 0, errClosed
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent, so nothing is reported to the breaker.
		return 0, err
	}
	gen, probe, ok := t.br.AllowCall()
	if !ok {
		return 0, tier.ErrBypassed
	}
	if probe {
		t.probe(gen)
		return 0, tier.ErrBypassed
	}
	return gen, nil
}

// probe sends a half-open breaker's probe, a PING bounded by the read
// budget, on a goroutine of the Tier's (Close waits for it), and reports
// its outcome in generation gen.
func (t *Tier) probe(gen uint64) {
	t.mu.RLock()
	if t.closed.Load() {
		t.mu.RUnlock()
		t.br.Done(gen, breaker.Ignore)
		return
	}
	t.wg.Add(1)
	t.mu.RUnlock()
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), t.opts.ReadBudget)
		defer cancel()
		t.end(ctx, gen, t.client.Do(ctx, t.client.B().Ping().Build()).Error())
	}()
}

// end reports the outcome of a call to the breaker. err is the first error
// from Redis (nil for success, a miss included); ctx is the caller's context.
//
// A call to a standalone server that timed out says little by itself: on
// a busy host the server, or this process, may not have run for the whole
// budget, and a burst of this process's own commands may queue ahead of
// it. So a timeout is judged by what the server did around it (see
// confirm): Late when it was seen answering, which counts only toward the
// breaker's failure rate; Silent when it answered nothing for the call's
// budget and then nothing to two PINGs (silentConfirm each), which opens the breaker
// at once: the server is frozen or cut off, not slow, and each of the
// breaker's other consecutive failures would be one more reader waiting
// the whole budget. Not in a Cluster with per-node health: there one
// node's silence says nothing of the others (on a quiet tier they may
// simply have had no calls), and per-node ejection takes the silent node
// out of reads. Nor for a half-open breaker's probe, whose failure
// reopens it as before.
func (t *Tier) end(ctx context.Context, gen uint64, err error) {
	o := outcome(ctx, err)
	if o == breaker.Failure {
		t.markSuspect(err)
		if t.nodes == nil && isTimeout(err) && t.br.State() == breaker.Closed {
			if time.Duration(t.opts.Clock.Now().UnixNano()-t.lastAnswer.Load()) < t.opts.ReadBudget {
				o = breaker.Late
			} else {
				t.confirm(gen)
				return
			}
		}
	}
	t.settle(gen, o)
}

// silentConfirm bounds the PING that tells a silent server from a late
// one: well past what a saturated host's scheduler delays a live server
// or this process (tens of milliseconds, a few hundred at worst), and
// short beside PingTimeout, which closes a frozen server's connections
// after one to two seconds. Readers do not wait for it: reads are
// bypassed while it is out (beginRead), so a frozen server costs one
// read its budget, not every read until the breaker opens.
const silentConfirm = 250 * time.Millisecond

// confirm settles a timed-out call in generation gen once the server has
// been asked whether it answers at all: a PING, bounded by silentConfirm,
// on a goroutine of the Tier's. Calls that time out while it is out wait
// for the same verdict. The server answers (the PING, or any call since
// the first timeout): they were Late. It does not: Silent. A PING that
// timed out is sent again, once: a process that did not run past the
// PING's deadline wakes to its answer and its deadline at once, and may
// take the deadline.
func (t *Tier) confirm(gen uint64) {
	t.confirmMu.Lock()
	t.confirming = append(t.confirming, gen)
	t.judging.Store(true)
	if len(t.confirming) > 1 {
		t.confirmMu.Unlock()
		return
	}
	t.confirmMu.Unlock()
	since := t.opts.Clock.Now().UnixNano()
	if !t.goOwned(func() { t.settleConfirmed(t.answers(since)) }) {
		t.settleConfirmed(breaker.Ignore)
	}
}

// answers returns Late when the server answers a PING, or has answered a
// call since since (Clock's unix nanoseconds), and Silent otherwise.
func (t *Tier) answers(since int64) breaker.Outcome {
	wait := max(t.opts.ReadBudget, silentConfirm)
	for range 2 {
		// Built for each send: rueidis recycles a command once sent.
		ping := t.client.B().Ping().Build()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := guard(ctx, t, func() error { return t.client.Do(ctx, ping).Error() }, func(err error) error { return err })
		cancel()
		switch {
		case err == nil || t.lastAnswer.Load() > since:
			return breaker.Late
		case errors.Is(err, errClosed):
			return breaker.Ignore
		}
	}
	return breaker.Silent
}

// settleConfirmed reports o for every call waiting on the confirmation.
func (t *Tier) settleConfirmed(o breaker.Outcome) {
	t.confirmMu.Lock()
	gens := t.confirming
	t.confirming = nil
	t.judging.Store(false)
	t.confirmMu.Unlock()
	for _, gen := range gens {
		t.settle(gen, o)
	}
}

// settle reports o to the breaker; a success SuspectFor after the last
// failure ends the suspicion.
func (t *Tier) settle(gen uint64, o breaker.Outcome) {
	at := t.opts.Clock.Now() // the breaker's clock too: one reading for both
	t.br.DoneAt(gen, o, at)
	if o != breaker.Success {
		return
	}
	now := at.UnixNano()
	if t.lastAnswer.Load() < now {
		t.lastAnswer.Store(now) // a lost update between racing calls is harmless
	}
	if t.suspect.Load() && time.Duration(now-t.lastBad.Load()) > suspectFor {
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
