package holdfast

import (
	"context"

	"github.com/holdfast-dev/holdfast/tier"
)

// Tracer traces the reads that leave the hot tier (Options.Tracer): one
// trace per read, and one per stage of the flight that answers it. A
// hot-tier hit never calls it, and costs nothing more with one set. Package
// holdfastotel implements it with OpenTelemetry spans; the core keeps no
// dependency on it.
//
// Concurrent reads of a key share one flight: the first read's trace is the
// parent of the flight's stages, and the others' traces end with their
// Result Collapsed. The stages of a load may end after the
// read's trace did (the shared-tier write follows the answer).
type Tracer interface {
	// StartRead begins the trace of a read of keys (one for Get) in
	// namespace that the hot tier could not answer, as a child of ctx's.
	// The flight the read leads runs its stages in the returned context.
	StartRead(ctx context.Context, namespace string, keys []string) (context.Context, ReadTrace)
	// StartStage begins a stage of a flight in ctx, a context StartRead
	// returned or one derived from it.
	StartStage(ctx context.Context, stage Stage) StageTrace
}

// ReadTrace ends a read's trace.
type ReadTrace interface {
	// End reports how the read was answered: for GetMany, res holds the
	// first key's answer and err the first error.
	End(res Result, err error)
}

// StageTrace ends a stage's trace.
type StageTrace interface {
	End(StageResult)
}

// Stage is one stage of a read's slow path.
type Stage uint8

const (
	StageSharedRead  Stage = iota + 1 // a read of the shared tier (one key, or a batch)
	StageLeaseWait                    // a wait for another process's load under its lease
	StageLimiter                      // the load limiter's decision
	StageLoad                         // the loader's call
	StageSharedWrite                  // the write of loaded values to the shared tier
)

func (s Stage) String() string {
	switch s {
	case StageSharedRead:
		return "shared_read"
	case StageLeaseWait:
		return "lease_wait"
	case StageLimiter:
		return "limiter"
	case StageLoad:
		return "load"
	case StageSharedWrite:
		return "shared_write"
	}
	return "unknown"
}

// StageResult is how a stage ended.
type StageResult struct {
	// Outcome: for a shared read "hit", "miss" or "error"; for a lease
	// wait "value" (the holder's value arrived) or "load" (this process
	// loads); for the limiter "admitted" or "rejected"; for a load "ok",
	// "not_found", "error", "timeout" or "panic"; for a write "ok" or
	// "error".
	Outcome string
	// Node is the shared-tier node that answered a read, when the tier
	// reports one (the Redis tier does in a Cluster; tier.ReportNode).
	Node string
	Err  error
}

// tracedRead marks the context of a traced read: only its flight's stages
// are traced (not those of a background refresh a hot-tier hit started).
type tracedRead struct{}

func (n *Namespace) startRead(ctx context.Context, tr Tracer, keys []string) (context.Context, ReadTrace) {
	ctx, rt := tr.StartRead(ctx, n.name, keys)
	return context.WithValue(ctx, tracedRead{}, true), rt
}

// startStage begins stage s in ctx when the Cache has a Tracer and ctx is
// a traced read's; nil otherwise.
func (n *Namespace) startStage(ctx context.Context, s Stage) StageTrace {
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

// sharedReadTraced is sharedGet inside a traced stage: the node the tier
// reports, and the outcome.
func (n *Namespace) sharedReadTraced(ctx context.Context, key string) (meta, tierStatus) {
	st := n.startStage(ctx, StageSharedRead)
	if st == nil {
		return n.sharedGet(ctx, key)
	}
	var node string
	ctx = tier.WithNodeReport(ctx, func(addr string) { node = addr })
	m, status := n.sharedGet(ctx, key)
	st.End(StageResult{Outcome: statusOutcome(status), Node: node})
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
