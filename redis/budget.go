package redis

import (
	"context"
	"sync/atomic"
	"time"
)

// readContext returns the context one read runs under: ctx bounded by the
// read budget, and the function to call when the read is done.
//
// A context with a deadline costs a timer; at tens of thousands of reads a
// second that was 7% of a shared-tier hit (measured here). So reads that the
// caller cannot cancel (the Cache's lookups, whose joiners depend on them)
// share one deadline context per millisecond, expiring the budget plus at
// most a millisecond after each of them began; reads a caller can cancel get
// their own.
//
// A shared context is cancelled once a later millisecond's has replaced it
// and its last read is done, which stops its timer: left to fire, each
// would wake the process once more per millisecond that had a read, about
// one wake-up per read at a few hundred reads a second.
func (t *Tier) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil {
		return context.WithTimeout(ctx, t.opts.ReadBudget)
	}
	now := time.Now()
	slot := now.UnixNano() / int64(time.Millisecond)
	for {
		s := t.budgetSlot.Load()
		if s != nil && s.slot == slot {
			if s.acquire() {
				return s.ctx, s.releaseFn
			}
			continue // replaced and released meanwhile: load the new one
		}
		end := time.Unix(0, (slot+1)*int64(time.Millisecond)).Add(t.opts.ReadBudget)
		n := &budgetSlot{slot: slot}
		n.ctx, n.cancel = context.WithDeadline(context.Background(), end)
		n.releaseFn = n.release
		n.refs.Store(2) // this read, and being the current slot
		if t.budgetSlot.CompareAndSwap(s, n) {
			if s != nil {
				s.release()
			}
			return n.ctx, n.releaseFn
		}
		n.cancel()
	}
}

// budgetSlot is the deadline context shared by the reads of one millisecond.
type budgetSlot struct {
	slot   int64
	ctx    context.Context
	cancel context.CancelFunc
	// refs counts the reads using ctx, plus one while the slot is current;
	// at zero ctx is cancelled and never handed out again.
	refs atomic.Int32
	// releaseFn is release, bound once so that each read does not
	// allocate a closure.
	releaseFn func()
}

// acquire takes a reference unless the slot has been released for good.
func (s *budgetSlot) acquire() bool {
	for {
		r := s.refs.Load()
		if r <= 0 {
			return false
		}
		if s.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (s *budgetSlot) release() {
	if s.refs.Add(-1) == 0 {
		s.cancel()
	}
}
