package holdfast

import (
	"context"

	"github.com/holdfast-dev/holdfast/observe"
	"github.com/holdfast-dev/holdfast/tier"
)

// The stages of a traced read (Options.Tracer), by the read path's names.
const (
	traceSharedRead  = observe.StageSharedRead
	traceLeaseWait   = observe.StageLeaseWait
	traceLimiter     = observe.StageLimiter
	traceLoad        = observe.StageLoad
	traceSharedWrite = observe.StageSharedWrite
)

type stageResult = observe.StageResult

// readTrace is a read's trace as the read path ends it, with its Result.
type readTrace struct{ t observe.ReadTrace }

func (r readTrace) End(res Result, err error) {
	r.t.End(observe.ReadResult{Source: res.Source.String(), Reason: res.Reason.String(), Collapsed: res.Collapsed, Stale: res.Stale(), Err: err})
}

// tracedRead marks the context of a traced read: only its flight's stages
// are traced (not those of a background refresh a hot-tier hit started).
type tracedRead struct{}

func (n *Namespace) startRead(ctx context.Context, tr observe.Tracer, keys []string) (context.Context, readTrace) {
	ctx, rt := tr.StartRead(ctx, n.name, keys)
	return context.WithValue(ctx, tracedRead{}, true), readTrace{rt}
}

// startStage begins stage s in ctx when the Cache has a Tracer and ctx is
// a traced read's; nil otherwise.
func (n *Namespace) startStage(ctx context.Context, s observe.Stage) observe.StageTrace {
	if tr := n.c.opts.Tracer; tr != nil && ctx.Value(tracedRead{}) != nil {
		return tr.StartStage(ctx, s)
	}
	return nil
}

// either returns yes when cond holds, else no.
func either(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// sharedReadTraced is the lookup's shared-tier read of j's key
// (sharedRead) inside a traced stage: the node the tier reports, and the
// outcome.
func (n *Namespace) sharedReadTraced(ctx context.Context, j *job, now int64) (meta, tierStatus) {
	st := n.startStage(ctx, traceSharedRead)
	if st == nil {
		return n.sharedRead(ctx, j, now)
	}
	var node string
	ctx = tier.WithNodeReport(ctx, func(addr string) { node = addr })
	m, status := n.sharedRead(ctx, j, now)
	st.End(stageResult{Outcome: statusOutcome(status), Node: node})
	return m, status
}

func statusOutcome(s tierStatus) string {
	switch s {
	case tierHit:
		return "hit"
	case tierMiss:
		return "miss"
	}
	return "error"
}
