package lab

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Naive is the "before" most services start from: plain cache-aside. GET with
// a 100 ms timeout; on a miss or any error, call the loader; then SET with a
// 100 ms timeout and ignore its failure. No breaker, no coalescing, no
// last-known-good value: a Redis failure costs every request its GET timeout
// (and its SET timeout), and every request for a missing key loads it. That
// is what production services measured: Spring's cache ran the loader 16
// times for 16 concurrent misses, and a stock-search autocomplete with Redis
// down waited for every get and set to fail (p95 2.56 s, p99 3.55 s). The
// project's first naive baseline was measured this way over go-redis (Redis
// frozen for 10 s under 200 req/s: frozen-window p99 10.3 s with go-redis's
// default timeouts, 3.36 s with 100 ms ones).
//
// The client is rueidis, like holdfast's tier, so that the comparison is of
// the read path and not of the client library. Its client-side caching is
// off (that would be an in-process tier of its own), retries are off, and
// the dial, connection write and per-command timeouts are all 100 ms: the
// Redis command timeout a production autocomplete service adopted after an
// outage.
type Naive struct {
	c       rueidis.Client // the cluster (or single-server) client; nil when routed
	routed  *nodesRouted   // ReaderConfig.RouteByClusterNodes
	opt     rueidis.ClientOption
	seeds   []string
	load    func(ctx context.Context, key string) ([]byte, error)
	ttl     time.Duration
	timeout time.Duration

	naiveCounters
}

// naiveCounters are the counts of every naive mode's cache-aside reads.
type naiveCounters struct {
	hits, misses, getErrors, setErrors, loadErrors atomic.Int64
}

// Stats returns the hit, miss and Redis error counts.
func (n *naiveCounters) Stats() map[string]float64 {
	return map[string]float64{
		"hits":             float64(n.hits.Load()),
		"misses":           float64(n.misses.Load()),
		"redis_get_errors": float64(n.getErrors.Load()),
		"redis_set_errors": float64(n.setErrors.Load()),
		"load_errors":      float64(n.loadErrors.Load()),
	}
}

var _ Reader = (*Naive)(nil)

// NewNaive builds the naive mode over cfg.RedisAddrs (a standalone server or
// a cluster: rueidis detects which).
func NewNaive(ctx context.Context, cfg ReaderConfig) (Reader, error) {
	if len(cfg.SentinelAddrs) > 0 {
		return newNaiveSentinel(cfg), nil
	}
	if len(cfg.RedisAddrs) == 0 {
		return nil, errors.New("naive mode needs a Redis address")
	}
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	n := &Naive{opt: naiveOptions(cfg), load: cfg.Load, ttl: ttl, timeout: cfg.timeout(), seeds: cfg.RedisAddrs}
	if cfg.RouteByClusterNodes {
		r, err := dialNodesRouted(cfg.RedisAddrs, n.opt)
		if err != nil {
			return nil, fmt.Errorf("naive: %w", err)
		}
		n.routed = r
	} else {
		c, err := rueidis.NewClient(n.opt)
		if err != nil {
			return nil, fmt.Errorf("naive: rueidis client: %w", err)
		}
		n.c = c
	}
	if cfg.LocalTTL > 0 {
		return &LocalTTL{Naive: n, ttl: cfg.LocalTTL, m: map[string]localEntry{}}, nil
	}
	return n, nil
}

// naiveOptions is the naive mode's rueidis client option. With
// cfg.ReadReplicas, read-only commands go to a node of the slot picked at
// random, primary or replica (the usual way of spreading reads over
// replicas), and rueidis routes by the topology alone: a replica listed
// there gets reads however far behind or empty it is.
func naiveOptions(cfg ReaderConfig) rueidis.ClientOption {
	t := cfg.timeout()
	o := rueidis.ClientOption{
		InitAddress:      cfg.RedisAddrs,
		DisableCache:     true,
		DisableRetry:     true,
		ConnWriteTimeout: t,
		Dialer:           netDialer(t),
	}
	if cfg.ReadReplicas {
		o.SendToReplicas = func(cmd rueidis.Completed) bool { return cmd.IsReadOnly() }
		o.ReadNodeSelector = randomNode
	}
	return o
}

// randomNode picks any of a slot's nodes (nodes[0] is the primary).
func randomNode(_ uint16, nodes []rueidis.NodeInfo) int { return rand.IntN(len(nodes)) }

// redial replaces the client with a new one, which reads the cluster's
// topology afresh; not safe while reads run. rueidis reads a cluster's
// topology when it is built and again only when a connection closes or a
// node answers MOVED, so a client built against a cluster that has just
// been created never lists its replicas (Redis leaves a replica out of
// CLUSTER SLOTS until it has replicated something): replica-resync redials
// once the replicas are in sync, as a service started against a running
// cluster would have them.
func (n *Naive) redial() error {
	if n.routed != nil {
		r, err := dialNodesRouted(n.seeds, n.opt)
		if err != nil {
			return fmt.Errorf("naive: %w", err)
		}
		n.routed.Close()
		n.routed = r
		return nil
	}
	c, err := rueidis.NewClient(n.opt)
	if err != nil {
		return fmt.Errorf("naive: rueidis client: %w", err)
	}
	n.c.Close()
	n.c = c
	return nil
}

// reader is the client a read of key goes to (the cluster client routes
// it on; nodesRouted picks the node here), nil when routed and no node
// serves key's slot.
func (n *Naive) reader(key string) rueidis.Client {
	if n.routed != nil {
		return n.routed.read(key)
	}
	return n.c
}

// writer is the client a write of key goes to: its slot's primary.
func (n *Naive) writer(key string) rueidis.Client {
	if n.routed != nil {
		return n.routed.write(key)
	}
	return n.c
}

// Get is cache-aside: GET, on miss or error load, then SET.
func (n *Naive) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, err := n.get(ctx, key)
	switch {
	case err == nil:
		n.hits.Add(1)
		return v, false, nil
	case rueidis.IsRedisNil(err):
		n.misses.Add(1)
	default:
		n.getErrors.Add(1)
	}
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	v, err = n.load(ctx, key)
	if err != nil {
		n.loadErrors.Add(1)
		return nil, false, err
	}
	if err := n.set(ctx, key, v); err != nil {
		n.setErrors.Add(1) // swallowed, as production cache adapters do: a failed put never fails the read
	}
	return v, false, nil
}

// Invalidate deletes key from Redis with the 100 ms timeout. A load that
// read the old value before the write can still SET it afterwards: the race
// stale-set-race measures.
func (n *Naive) Invalidate(ctx context.Context, key string) error {
	c := n.writer(key)
	if c == nil {
		return errNoSlotOwner
	}
	dctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	return c.Do(dctx, c.B().Del().Key(key).Build()).Error()
}

// get is one GET of key with the timeout.
func (n *Naive) get(ctx context.Context, key string) ([]byte, error) {
	c := n.reader(key)
	if c == nil {
		return nil, errNoSlotOwner
	}
	gctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	return c.Do(gctx, c.B().Get().Key(key).Build()).AsBytes()
}

// set is one SET of key with the TTL and the timeout.
func (n *Naive) set(ctx context.Context, key string, v []byte) error {
	c := n.writer(key)
	if c == nil {
		return errNoSlotOwner
	}
	sctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	return c.Do(sctx, c.B().Set().Key(key).Value(rueidis.BinaryString(v)).Px(n.ttl).Build()).Error()
}

// Close closes the client.
func (n *Naive) Close() error {
	if n.routed != nil {
		n.routed.Close()
		return nil
	}
	n.c.Close()
	return nil
}

func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: time.Second}
}

// LocalTTL is the naive mode as a two-level cache (ReaderConfig.LocalTTL):
// an in-process map whose entries live a fixed time, in front of Naive's
// cache-aside over Redis, as services commonly put a Caffeine or a
// ristretto in front of their Redis. Nothing tells a process of another's
// write: an entry is dropped only when its time is up (or by this process's
// own Invalidate), so another process's update reaches it within the TTL.
type LocalTTL struct {
	*Naive
	ttl time.Duration

	mu sync.Mutex
	m  map[string]localEntry

	localHits atomic.Int64
}

type localEntry struct {
	v   []byte
	exp time.Time
}

var (
	_ Reader       = (*LocalTTL)(nil)
	_ tieredReader = (*LocalTTL)(nil)
)

// Get answers from the local map while the entry lives, else reads through
// Naive and keeps the value for the TTL.
func (l *LocalTTL) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, _, stale, err := l.GetTiered(ctx, key)
	return v, stale, err
}

// GetTiered is Get, also saying whether the local map answered.
func (l *LocalTTL) GetTiered(ctx context.Context, key string) ([]byte, bool, bool, error) {
	now := time.Now()
	l.mu.Lock()
	e, ok := l.m[key]
	l.mu.Unlock()
	if ok && now.Before(e.exp) {
		l.localHits.Add(1)
		return e.v, true, false, nil
	}
	v, stale, err := l.Naive.Get(ctx, key)
	if err != nil {
		return nil, false, false, err
	}
	l.mu.Lock()
	l.m[key] = localEntry{v: v, exp: time.Now().Add(l.ttl)}
	l.mu.Unlock()
	return v, false, stale, nil
}

// Invalidate drops this process's entry and deletes key from Redis; the
// other processes' entries stay until their time is up.
func (l *LocalTTL) Invalidate(ctx context.Context, key string) error {
	l.mu.Lock()
	delete(l.m, key)
	l.mu.Unlock()
	return l.Naive.Invalidate(ctx, key)
}

// Stats adds the local hits and entries to Naive's counts (whose hits and
// misses are then of the reads that reached Redis).
func (l *LocalTTL) Stats() map[string]float64 {
	out := l.Naive.Stats()
	out["local_hits"] = float64(l.localHits.Load())
	l.mu.Lock()
	out["local_entries"] = float64(len(l.m))
	l.mu.Unlock()
	return out
}
