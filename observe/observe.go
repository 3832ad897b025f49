// Package observe is what an exporter or a tracer implements for holdfast,
// as package tier is what a shared tier implements: the Recorder of load
// latencies (holdfast.Cache.SetRecorder), the Tracer of the reads that leave
// the hot tier (holdfast.Options.Tracer), and the description of each
// measure of a namespace's holdfast.Stats. An application that only reads
// through a Cache, or registers holdfastprom or holdfastotel, never needs
// it.
package observe

import (
	"context"
	"time"
)

// Recorder receives measurements that need a distribution rather than a
// count. Its methods are called on the load path (milliseconds), never on a
// hit; they must be safe for concurrent use and must not block.
type Recorder interface {
	// ObserveLoad reports one loader call: its namespace, how long it took,
	// and its outcome ("ok", "not_found", "error", "timeout", "panic").
	ObserveLoad(namespace string, d time.Duration, outcome string)
}

// Metric describes one measure of a holdfast.Stats: holdfast.Stats.All
// yields each with its value, in the same order in every Stats (the zero
// Stats included, so an exporter can describe them all before the first
// snapshot), and a measure added to the Cache reaches every exporter that
// iterates them.
type Metric struct {
	// Name is lower case, its words joined by "_" and its parts by ".":
	// "hot.hits", "load.errors". OpenTelemetry exporters publish it after
	// "holdfast."; Prometheus ones with each "." as "_" after "holdfast_",
	// and "_total" after a counter's.
	Name string
	// Unit is the value's unit in UCUM: an annotation such as "{read}"
	// for a count of events, "By" for bytes, "1" for a flag (0 or 1), "ms"
	// for milliseconds (published in seconds).
	Unit string
	// Help says what it measures.
	Help string
	// Gauge is set on a level now (entries held, a flag); a counter,
	// without it, counts events since the Cache was created.
	Gauge bool
}

// Tracer traces the reads that leave the hot tier (holdfast.Options.Tracer):
// one trace per read, and one per stage of the flight that answers it. A
// hot-tier hit never calls it, and costs nothing more with one set. Package
// holdfastotel implements it with OpenTelemetry spans.
//
// Concurrent reads of a key share one flight: the first read's trace is the
// parent of the flight's stages, and the others' traces end with their
// ReadResult Collapsed. The stages of a load may end after the read's trace
// did (the shared-tier write follows the answer).
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
	// End reports how the read was answered: for GetMany, the first key's
	// answer and the first error.
	End(ReadResult)
}

// ReadResult is how a traced read was answered.
type ReadResult struct {
	// Source and Reason name the holdfast.Result's Source and Reason as
	// their String methods do ("hot", "shared", …; "none", "tier-down", …).
	Source, Reason string
	// Collapsed: the read waited for another read's fetch.
	Collapsed bool
	// Stale: the value was served past its soft time.
	Stale bool
	// Err is the read's error, or nil.
	Err error
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
