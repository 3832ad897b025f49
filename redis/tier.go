package redis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/internal/tierdriver"
	"github.com/holdfast-dev/holdfast/tier"
)

// Tier is a tier.Tier backed by Redis, with every optional interface of
// package tier: give it to holdfast.Options.Shared. The methods listed
// here are the ones its user calls; the Cache's own calls (Get, Set,
// Invalidate and the rest of package tier's interfaces) are methods of
// Tier too, left out of this documentation. It is safe for concurrent use.
type Tier struct {
	// driver is the Tier itself as tierDriver: the methods the Cache
	// calls, which go doc leaves out of Tier's documentation.
	driver
	client  rueidis.Client
	opts    Options
	cluster bool
	br      *breaker.Breaker
	nodes   *nodeSet // per-node health in Cluster mode; nil otherwise
	// versionedMisses is the share of recent versioned reads that
	// missed, in 1/1024ths (missedMostly).
	versionedMisses atomic.Int32
	flog            *failureLog
	closed          atomic.Bool
	stats           counters

	// sentinel is client in the Sentinel shape; nil otherwise.
	sentinel *sentinelClient
	// reps routes reads over a Sentinel group's primary and ready
	// replicas (sentinel_reads.go); nil otherwise.
	reps atomic.Pointer[nodeSet]
	// moved is closed, and replaced, at each of the Sentinel shape's
	// moves to a new primary, so that the stream's subscription knows at
	// once that it is on an old one (primaryMoves).
	moved atomic.Pointer[chan struct{}]

	// budgetSlot is the read context shared by uncancellable reads of the
	// current millisecond (see readContext).
	budgetSlot atomic.Pointer[budgetSlot]

	// suspect is set when a call fails and cleared by a success
	// SuspectFor after the last failure (lastBad, Clock's unix nanoseconds).
	// See guarded.
	suspect atomic.Bool
	lastBad atomic.Int64
	// lastReason is reasonOf the last failure (see Health).
	lastReason atomic.Value
	// lastAnswer is when Redis last answered a call (Clock's unix
	// nanoseconds; the Tier's start until the first): a call that times
	// out with an answer within a read budget before is Late (see end).
	lastAnswer atomic.Int64
	// confirming holds the generations of the timed-out calls waiting on
	// the PING that tells a silent server from a late one (see confirm).
	confirmMu  sync.Mutex
	confirming []uint64
	// judging is set while that PING is out: reads are bypassed
	// meanwhile (see beginRead).
	judging atomic.Bool

	// filling holds the copy keys being filled now (smear.go).
	filling sync.Map

	// streamID names this tier's heartbeat channel (stream.go).
	streamID string
	// streamLost is set when the stream reports a loss, cleared by the
	// heartbeat that ends it (streamRecovered).
	streamLost atomic.Bool

	// mu orders guard goroutines' wg.Add before Close's wg.Wait.
	mu sync.RWMutex
	wg sync.WaitGroup
}

var _ tier.Tier = (*Tier)(nil)

// driver is the interface Tier and Lazy embed to carry the methods the
// Cache calls (tierdriver.Driver): an alias of a type in another package,
// so that go doc, which sees this package alone, does not list them.
type driver = tierdriver.Driver

// tierDriver is Tier with the methods the Cache calls.
type tierDriver Tier

var _ tierdriver.Driver = (*tierDriver)(nil)

// New validates opts, connects to Redis and detects whether it is a Cluster;
// with Options.Sentinel it asks the sentinels for the primary and connects
// to it.
// It returns an error, and never panics, on invalid options or when no
// address answers within DialTimeout.
//
// An error of configuration (the credentials refused, a certificate not
// trusted) says so: "redis tier: connect to [...]: authentication failed:
// WRONGPASS ...", and is logged to Options.Logger.
func New(opts Options) (*Tier, error) {
	o, _, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return connectTier(opts, &failureLog{log: o.Logger, now: o.Clock.Now})
}

// connectTier is New logging configuration errors to flog, which Lazy keeps
// across its attempts.
func connectTier(opts Options, flog *failureLog) (*Tier, error) {
	o, bs, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	br, err := breaker.New(bs, o.Clock.Now)
	if err != nil {
		return nil, fmt.Errorf("redis tier: %w", err)
	}
	co := rueidis.ClientOption{
		InitAddress:      o.Addrs,
		Username:         o.Username,
		Password:         o.Password,
		TLSConfig:        o.TLS,
		ConnWriteTimeout: o.PingTimeout,
		DisableCache:     true,
		DisableRetry:     true,
		// Without it, a lone call runs synchronously on the connection with
		// the ctx deadline as a socket deadline: a caller's cancellation is
		// not seen until the budget runs out, and every budget timeout
		// closes the connection. Pipelined, a call waits on a channel and
		// leaves at ctx.Done (budget or cancellation) while the connection
		// stays up; a silent connection is closed by PingTimeout's PINGs.
		AlwaysPipelining: true,
	}
	co.Dialer.Timeout = o.DialTimeout
	if o.sentinel() {
		return connectSentinel(o, br, co, flog)
	}
	if !o.Cluster.Disabled {
		// Ignored by a standalone server. In a Cluster, rueidis refreshes
		// its own map (which keyless commands and redirected ones use) on
		// MOVED, ASK, TRYAGAIN, CLUSTERDOWN and lost connections, and
		// otherwise at the Tier's steady pace: each refresh asks up to
		// four nodes.
		co.ClusterOption.ShardsRefreshInterval = o.Cluster.SteadyTopologyInterval
	}
	client, err := rueidis.NewClient(co)
	if err == nil && client.Mode() == rueidis.ClientModeCluster && !o.Cluster.Disabled {
		// Whether it is a Cluster is known only once connected. With
		// per-node health, the watchdog frees a connection with a request
		// outstanding (SilentConnTimeout), and the idle ones need no PING
		// a second each: made again, once, with the Cluster's pace.
		client.Close()
		co.Dialer.KeepAlive = clusterKeepAlive
		client, err = rueidis.NewClient(co)
	}
	if err != nil {
		flog.failed(err)
		return nil, connectError(o.Addrs, err)
	}
	t := &Tier{
		client:   client,
		opts:     o,
		cluster:  client.Mode() == rueidis.ClientModeCluster,
		br:       br,
		flog:     flog,
		streamID: newStreamID(),
	}
	t.driver = (*tierDriver)(t)
	t.lastAnswer.Store(o.Clock.Now().UnixNano())
	if t.cluster && !o.Cluster.Disabled {
		if t.nodes, err = newNodeSet(t, false); err != nil {
			client.Close()
			flog.failed(err)
			return nil, connectError(o.Addrs, err)
		}
	}
	t.warm()
	return t, nil
}

// connectSentinel is connectTier for the Sentinel shape: co is the
// primary's client option.
func connectSentinel(o Options, br *breaker.Breaker, co rueidis.ClientOption, flog *failureLog) (*Tier, error) {
	t := &Tier{opts: o, br: br, flog: flog, streamID: newStreamID()}
	t.driver = (*tierDriver)(t)
	sc, err := newSentinelClient(o, co, t.primaryMoved)
	if err != nil {
		flog.failed(err)
		return nil, connectError(o.Sentinel.Addrs, err)
	}
	t.client, t.sentinel = sc, sc
	t.lastAnswer.Store(o.Clock.Now().UnixNano())
	if !o.Cluster.Disabled {
		rs, err := newNodeSet(t, true)
		if err != nil {
			sc.Close()
			flog.failed(err)
			return nil, connectError(o.Sentinel.Addrs, err)
		}
		t.reps.Store(rs)
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

// Sentinel reports whether the tier talks to the primary of a Sentinel
// group.
func (t *Tier) Sentinel() bool { return t.sentinel != nil }

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
	if rs := t.reps.Load(); rs != nil {
		rs.close()
	}
	t.client.Close()
	t.wg.Wait()
	// Again, now that the guarded calls have returned: rueidis does not
	// close a connection that a call was dialling while Close ran.
	t.client.Close()
	return nil
}
