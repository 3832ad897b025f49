package redis

import (
	"context"
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
func (t *Tier) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil {
		return context.WithTimeout(ctx, t.opts.ReadBudget)
	}
	now := time.Now()
	slot := now.UnixNano() / int64(time.Millisecond)
	if s := t.budgetSlot.Load(); s != nil && s.slot == slot {
		return s.ctx, noCancel
	}
	end := time.Unix(0, (slot+1)*int64(time.Millisecond)).Add(t.opts.ReadBudget)
	sctx, cancel := context.WithDeadline(context.Background(), end)
	t.budgetSlot.Store(&budgetSlot{slot: slot, ctx: sctx, cancel: cancel})
	return sctx, noCancel
}

// budgetSlot is the deadline context shared by the reads of one millisecond.
// Its timer ends it at its deadline; nothing cancels it earlier.
type budgetSlot struct {
	slot   int64
	ctx    context.Context
	cancel context.CancelFunc
}

func noCancel() {}
