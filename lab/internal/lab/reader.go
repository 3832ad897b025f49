package lab

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reader is what a mode puts in front of the source: the read path the load
// generator calls. stale reports a value served past its freshness.
type Reader interface {
	Get(ctx context.Context, key string) (value []byte, stale bool, err error)
	// Invalidate drops key after a write to the source (cache-aside's
	// delete-on-write).
	Invalidate(ctx context.Context, key string) error
	// Stats returns the mode's own counters for the table's extra figures
	// (hits, tier errors...). Names are snake_case.
	Stats() map[string]float64
	Close() error
}

// tieredReader is a Reader that says which reads its in-process tier
// answered: holdfast's hot tier (Result.Source == SourceHot), the naive
// mode's local TTL cache.
type tieredReader interface {
	GetTiered(ctx context.Context, key string) (value []byte, local, stale bool, err error)
}

// ReaderConfig is what a scenario gives a mode to build its Reader.
type ReaderConfig struct {
	// RedisAddrs are the shared tier's addresses: one for standalone, the
	// nodes of a cluster otherwise. Empty means no shared tier.
	RedisAddrs []string
	// DialTimeout bounds each connect of holdfast's Redis tier. Zero means
	// the library's default (1 s). fleet-idle's children raise it: 200
	// Caches' connections opened on 2 cores saturate the machine, and a
	// dial that then takes longer measures the harness, not the tier.
	DialTimeout time.Duration
	// SentinelAddrs and SentinelMaster, when set instead of RedisAddrs,
	// are the sentinels of a primary with replicas and the name they
	// monitor it under.
	SentinelAddrs  []string
	SentinelMaster string
	// Load is the source of truth (the database).
	Load func(ctx context.Context, key string) ([]byte, error)
	// TTL is how long a value is fresh: the naive mode's Redis TTL, and
	// holdfast's hard TTL.
	TTL time.Duration
	// SoftTTL is when holdfast starts refreshing a value while still
	// serving it (stale-while-revalidate). Zero means 0.8×TTL.
	SoftTTL time.Duration
	// StaleIfError is how long past TTL holdfast may serve a value when the
	// source or the tier fails. Zero means none.
	StaleIfError time.Duration
	// LoadCap is the source's concurrency cap, given to modes that have a
	// load limiter of their own. Zero means no cap (a large limit).
	LoadCap int
	// Leases makes holdfast coalesce loads across processes with per-key
	// leases (Policy.Lease). The naive mode has nothing of the kind.
	Leases bool
	// HotDisabled turns holdfast's in-process hot tier off, so that every
	// read goes to Redis: the cluster scenarios measure the Redis tier's
	// per-node health, which a hot tier holding every key would hide. The
	// naive mode has no hot tier either way.
	HotDisabled bool
	// HotThreshold, when positive, makes holdfast's hot tier admit the keys
	// read at least this many times a second in the process (Hot.Threshold) instead of the library's default.
	HotThreshold float64
	// HotShare makes holdfast's namespace exchange the keys it finds hot
	// with the other processes through Redis (Hot.Share, every
	// Options.HotShareInterval, the library's 5 s), which also gives it the
	// library's warm start: at Cache.Namespace, the values of the keys in
	// the shared hot set are read into the hot tier. NoWarmStart turns the
	// warm start off (Hot.NoWarmStart) and keeps the sharing. The naive
	// mode has neither.
	HotShare, NoWarmStart bool
	// LastKnownGoodBytes, when positive, bounds holdfast's last-known-good
	// store (Policy.LastKnownGoodBytes) below its default. The naive mode
	// has none.
	LastKnownGoodBytes int64
	// LocalTTL, when positive, puts an in-process TTL cache in front of the
	// naive mode's Redis (the usual two-level cache: a local map whose
	// entries live LocalTTL, then cache-aside over Redis). Zero: none, every
	// naive read goes to Redis. holdfast ignores it.
	LocalTTL time.Duration
	// ReadReplicas makes the naive mode read from replicas as deployed
	// setups do (rueidis SendToReplicas for read-only commands, each read
	// sent to a node picked at random among the slot's primary and
	// replicas, like go-redis's RouteRandomly): nothing checks that a
	// replica has its data, so a replica in full resync answers reads.
	// Writes still go to the primary. holdfast ignores it (its tier reads
	// the primary and the replicas it finds ready).
	ReadReplicas bool
	// RouteByClusterNodes makes the naive mode's reads of replicas go
	// through a client that reads its topology from CLUSTER NODES once, as
	// Lettuce (Spring's default Redis client) does by default, instead of
	// rueidis's cluster client, which routes by CLUSTER SLOTS and re-reads
	// it after a connection closes (nodesRouted says what differs). Needs
	// ReadReplicas' cluster; holdfast ignores it.
	RouteByClusterNodes bool
	// Timeout is the naive mode's per-command Redis timeout (100 ms, as a
	// production autocomplete service set it) and holdfast's read budget.
	// Zero means 100 ms.
	Timeout time.Duration
}

func (c ReaderConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 100 * time.Millisecond
}

// Mode is one way of reading through the cache: the naive baseline or
// holdfast. New returns a *MissingError when the mode's parts do not exist.
type Mode struct {
	Name string
	New  func(ctx context.Context, cfg ReaderConfig) (Reader, error)
}

// Modes are run in this order in every scenario: the "before" first.
var Modes = []Mode{
	{Name: "naive", New: NewNaive},
	{Name: "holdfast", New: NewHoldfast},
}

// MissingError reports that a part a scenario or mode needs is not built
// yet. The lab prints it and exits non-zero; it never fakes the part.
type MissingError struct {
	Part string
}

func (e *MissingError) Error() string { return "missing: " + e.Part }

// IsMissing reports whether err says a part is missing.
func IsMissing(err error) bool {
	var m *MissingError
	return errors.As(err, &m)
}

// classify turns a Reader's answer into an Outcome.
func classify(stale bool, err error) Outcome {
	switch {
	case err == nil && stale:
		return Stale
	case err == nil:
		return OK
	case errors.Is(err, ErrRejected):
		return Rejected
	}
	return Failed
}

func wrapMode(mode string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mode %s: %w", mode, err)
}
