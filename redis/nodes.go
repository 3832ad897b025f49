package redis

import (
	"context"
	"crypto/tls"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Per-node health in Cluster mode. A breaker on the whole tier
// stays closed when one node of many fails, and rueidis's slot map lags the
// real connections, so each node gets its own isolation:
//
//   - an ejector (ejector.go): ConsecutiveFailures timeouts or connection
//     errors in a row, or FailureRate of MinRequests, take the node out of
//     the read and write paths; a background PING on jittered exponential
//     backoff (ProbeInterval, 250 ms, doubling up to MaxProbeInterval,
//     1 s) brings it back. At most MaxEjectedShare of the nodes are out at
//     once: past that the tier fails open and the tier's breaker sees the
//     failures;
//   - a watchdog (watchdog.go) that closes a connection with a request
//     outstanding and nothing received for SilentConnTimeout (1 s);
//   - readiness (readiness.go), polled in the background every second
//     while the shard is read, each shard's primary first and then its
//     replicas, which take reads only once they have reached the
//     primary's offset;
//   - random routing (routing.go): each read goes to a node picked uniformly
//     among its slot's primary and ready replicas, never by latency (routing
//     to the fastest node skewed the load five to ten times).
//
// The slot map is in topology.go, the per-node counters in nodestats.go.
//
// Reads use two rueidis clients per node (nodeSet.newNode), dialled through
// dialNode so that every connection is watched: one runs READONLY, for
// reads of the slots the map says the node replicates (and the polls and
// probes); the other does not, for reads of the slots the map says it
// serves as their primary, which a node that is no longer the primary
// answers with MOVED instead of its old data. Writes and the
// MOVED/ASK follow-ups use the tier's Cluster client, which routes to
// primaries and follows redirects itself. One goroutine (run) schedules
// the background work: the watchdog scan each tick, the slot map (at once
// after a MOVED, ASK, CLUSTERDOWN, a lost connection or a role change seen
// by a poll, then every TopologyInterval for a minute and while a node is
// ejected, otherwise every SteadyTopologyInterval), the readiness polls of
// the shards being read, and the probes. A Cache that reads nothing thus
// costs each node a CLUSTER SLOTS per SteadyTopologyInterval from a
// fraction of the processes, and no INFO at all; the I/O
// itself runs on goroutines owned by the Tier, one at most per node and
// kind.

// node is one Cluster node.
type node struct {
	addr   string
	set    *nodeSet
	client rueidis.Client // READONLY: reads as a replica, polls, probes
	// asPrimary has no READONLY: every read sent to the node as its slot's
	// primary goes there (routing.go), so that a node that is not the
	// slot's primary answers MOVED instead of its own copy.
	asPrimary rueidis.Client

	_                                   [64]byte
	requests, failures, timeouts, reads counter

	ejected atomic.Bool
	dirty   atomic.Bool // a failure is in the ejector's window; see report
	ready   atomic.Bool
	primary atomic.Bool  // role in the current slot map
	lastBad atomic.Int64 // Clock's unix nanoseconds of the last failure; 0 if none
	// currentAt is sinceStart when the poll was sent of the latest primary
	// offset this node is known to hold all of: its own poll's for a
	// primary, its primary's for a replica that had reached it; 0 if none.
	// A slot written before it can be read here (routing.go).
	currentAt atomic.Int64
	// freshUntil is sinceStart until which the last round proves this
	// replica (the bound of readiness.go): past it, reads skip it until a
	// round proves it again. 0 when not ready.
	freshUntil atomic.Int64
	// On a shard's primary: wanted is set by every read routed to the
	// shard and cleared when its round starts; roundAt is sinceStart when
	// the last round started. Rounds run only for shards that are read
	// (readiness.go).
	wanted    atomic.Bool
	roundAt   atomic.Int64
	gen       atomic.Uint64
	pollNow   atomic.Bool
	closes    atomic.Uint64
	probes    atomic.Uint64
	probeErrs atomic.Uint64
	polls     atomic.Uint64
	pollErrs  atomic.Uint64

	mu          sync.Mutex
	ej          ejector
	conns       map[*watchedConn]struct{}
	closed      bool // close has run: a connection dialled now is refused
	probing     bool
	polling     bool
	repl        replState
	replGen     uint64  // gen the last good poll was sent in
	replOK      bool    // repl is from a good poll since the last failure or role change
	polledAt    int64   // sinceStart when the last good poll was sent
	ref         pollRef // the primary's offset the last good poll was judged against
	proven      bool    // ready from a full round, and nothing since took it out
	lastPrimary pollRef // this node's last answer as a primary, for its replicas
	reason      string
	readies     uint64
	lastEjected time.Time
}

// nodeSet holds the nodes, the slot map and the background loop.
type nodeSet struct {
	t     *Tier
	o     ClusterOptions
	clock func() time.Time
	tick  time.Duration

	topo    atomic.Pointer[topology]
	ejected atomic.Int32
	// kickedAt is sinceStart of the last kickTopology; 0 if none.
	kickedAt atomic.Int64

	mu         sync.Mutex
	nodes      map[string]*node
	retired    map[string]retiredNode // left the map lately; see install
	refreshing bool
	closed     bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	start   time.Time
	written []atomic.Int64 // per slot: when this Tier last wrote it, ns since start

	// sentinel: the nodes are a Sentinel group's primary and replicas,
	// one shard over every slot, learnt from the primary's INFO
	// (sentinel_reads.go), not a Cluster's.
	sentinel bool
}

// clusterKeepAlive is how long a Cluster connection may be idle before
// rueidis PINGs it (Dialer.KeepAlive; rueidis's default is a second). A
// connection with a request outstanding is the watchdog's: a PING a second
// on each idle one, from every process, would be the most of what an
// idle fleet costs a node.
const clusterKeepAlive = 10 * time.Second

// pollTimeout bounds a readiness poll and a slot map request.
const pollTimeout = 500 * time.Millisecond

func newNodeSet(t *Tier, sentinel bool) (*nodeSet, error) {
	o := t.opts.Cluster
	s := &nodeSet{
		t:        t,
		o:        o,
		clock:    t.opts.Clock.Now,
		tick:     min(50*time.Millisecond, o.SilentConnTimeout/10),
		nodes:    make(map[string]*node),
		retired:  make(map[string]retiredNode),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		start:    time.Now(),
		written:  make([]atomic.Int64, slotCount),
		sentinel: sentinel,
	}
	if s.tick < time.Millisecond {
		s.tick = time.Millisecond
	}
	if sentinel {
		t.client = noteKeyWrites{Client: t.client, s: s}
	} else {
		t.client = noteWrites{Client: t.client, s: s}
	}
	if err := s.refresh(); err != nil {
		s.closeAll()
		return nil, err
	}
	// A start is a change too: a fresh Cluster lists a replica in
	// CLUSTER SLOTS only once its offset has been gossiped.
	s.kickedAt.Store(s.sinceStart())
	// One readiness round before New returns, so that replicas take their
	// share of reads from the first call.
	var wg sync.WaitGroup
	for _, sh := range s.topo.Load().shards {
		for _, n := range sh.nodes {
			n.mu.Lock()
			n.polling = true
			n.mu.Unlock()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.round(sh.nodes[0], sh.nodes)
		}()
	}
	wg.Wait()
	go s.run()
	return s, nil
}

// newNode creates a node and its clients. They dial at once; a node that
// does not answer is still returned (ForceSingleClient), to be found out by
// its requests.
func (s *nodeSet) newNode(addr string) *node {
	n := &node{addr: addr, set: s, conns: make(map[*watchedConn]struct{}), ej: newEjector(s.o)}
	if n.client = s.nodeClient(n, true); n.client == nil {
		return nil
	}
	if s.sentinel {
		// Outside a Cluster READONLY means nothing: one client serves.
		n.asPrimary = n.client
		return n
	}
	if n.asPrimary = s.nodeClient(n, false); n.asPrimary == nil {
		n.client.Close()
		return nil
	}
	return n
}

// nodeClient creates a client of n's own, whose connections are watched
// and, when readonly is set, send READONLY.
func (s *nodeSet) nodeClient(n *node, readonly bool) rueidis.Client {
	o := s.t.opts
	co := singleNodeOption(o, n.addr)
	co.AlwaysPipelining = true
	co.PipelineMultiplex = -1 // one connection per node, as rueidis's Cluster client
	co.Dialer.KeepAlive = clusterKeepAlive
	co.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		return dialNode(ctx, n, dst, d, cfg, o.Username, o.Password, readonly && !s.sentinel)
	}
	c, _ := rueidis.NewClient(co)
	return c
}

// singleNodeOption is the options of a client of addr alone, with o's
// credentials and timeouts, and neither rueidis's cache nor its retries.
func singleNodeOption(o Options, addr string) rueidis.ClientOption {
	co := rueidis.ClientOption{
		InitAddress:       []string{addr},
		Username:          o.Username,
		Password:          o.Password,
		TLSConfig:         o.TLS,
		ConnWriteTimeout:  o.PingTimeout,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: true,
	}
	co.Dialer.Timeout = o.DialTimeout
	return co
}

// probeEjectedNow makes every ejected node's next probe due now, its
// backoff started over (see Tier.streamRecovered).
func (s *nodeSet) probeEjectedNow() {
	now := s.clock()
	s.mu.Lock()
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	s.mu.Unlock()
	for _, n := range nodes {
		n.mu.Lock()
		n.ej.probeNow(now)
		n.mu.Unlock()
	}
}

// liveAddrs returns the addresses of the nodes not ejected.
func (s *nodeSet) liveAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.nodes))
	for addr, n := range s.nodes {
		if !n.ejected.Load() {
			out = append(out, addr)
		}
	}
	return out
}

// close closes n's clients, which makes calls still inside them return,
// then every connection of n's still open. rueidis does not close a
// connection that a call is dialling while its Close runs (the dial stores
// it over the closed one), so a dial that ends before close is closed here
// and one that ends after it is refused (connOpened).
func (n *node) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.client.Close()
	if n.asPrimary != n.client {
		n.asPrimary.Close()
	}
	n.mu.Lock()
	open := make([]*watchedConn, 0, len(n.conns))
	for c := range n.conns {
		open = append(open, c)
	}
	n.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// run is the background loop; Close stops it.
func (s *nodeSet) run() {
	defer close(s.done)
	tk := time.NewTicker(s.tick)
	defer tk.Stop()
	now := time.Now()
	lastTopo := now
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.startRefresh()
			continue
		case <-tk.C:
		}
		now = time.Now()
		s.scan(now)
		if now.Sub(lastTopo) >= s.topologyEvery() {
			lastTopo = now
			s.startRefresh()
		}
		clock := s.clock()
		tp := s.topo.Load()
		for _, n := range tp.nodes {
			if n.ejected.Load() {
				s.maybeProbe(n, clock)
			}
		}
		for _, sh := range tp.shards {
			s.pollShard(sh)
		}
	}
}

// settleFor is how long after the start or a sign that the Cluster is
// changing (see kickTopology) the slot map is refreshed every TopologyInterval rather
// than every SteadyTopologyInterval: a failover takes the node timeout
// (15 s by default) and an election.
const settleFor = time.Minute

// topologyEvery is the slot map's refresh interval now.
func (s *nodeSet) topologyEvery() time.Duration {
	k := s.kickedAt.Load()
	if s.sentinel && s.readLately() {
		return s.o.TopologyInterval
	}
	if s.ejected.Load() > 0 || (k != 0 && time.Duration(s.sinceStart()-k) < settleFor) {
		return s.o.TopologyInterval
	}
	return s.o.SteadyTopologyInterval
}

// kickTopology asks the loop for a slot map refresh now, and refreshes
// it every TopologyInterval for settleFor.
func (s *nodeSet) kickTopology() {
	s.kickedAt.Store(s.sinceStart())
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *nodeSet) startRefresh() {
	s.mu.Lock()
	if s.refreshing || s.closed {
		s.mu.Unlock()
		return
	}
	s.refreshing = true
	s.mu.Unlock()
	if !s.t.goOwned(func() {
		_ = s.refresh() // on failure the old map stays; the next interval retries
		s.mu.Lock()
		s.refreshing = false
		s.mu.Unlock()
	}) {
		s.mu.Lock()
		s.refreshing = false
		s.mu.Unlock()
	}
}

// scan is the watchdog: it closes connections silent for SilentConnTimeout
// with a request outstanding.
func (s *nodeSet) scan(now time.Time) {
	var silent []*watchedConn
	for _, n := range s.topo.Load().nodes {
		n.mu.Lock()
		for c := range n.conns {
			if c.watch.silent(c.lastWrite.Load(), c.lastRead.Load(), now, s.o.SilentConnTimeout) {
				silent = append(silent, c)
			}
		}
		n.mu.Unlock()
	}
	for _, c := range silent {
		c.node.closes.Add(1)
		_ = c.Close()
	}
}

// report records the outcome of a request to n and returns what the tier's
// breaker should count: a node failure counts there only when the node
// could not be ejected because MaxEjectedShare is reached, so that one bad
// node never opens the breaker for the whole tier.
//
// While a node has had no failure in its window (dirty false), a success
// takes a lock-free path and is not counted in the window: FailureRate is
// then the share of failures among the requests since the first failure
// in the window, a little quicker to eject than a share of all of them.
func (s *nodeSet) report(n *node, failed, timeout bool) (countForTier bool) {
	if !failed && !n.dirty.Load() {
		return false
	}
	now := s.clock()
	if failed {
		n.failures.add(1)
		if timeout {
			n.timeouts.add(1)
		}
		n.lastBad.Store(now.UnixNano())
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	eject := n.ej.record(now, failed)
	if failed {
		n.dirty.Store(true)
	} else if n.ej.quiet(now) {
		n.dirty.Store(false)
	}
	if !eject {
		return failed && !n.ej.ejected && s.atCap()
	}
	if !s.tryEject() {
		n.ej.refuse()
		return true
	}
	n.ej.eject(now, rand.Float64())
	n.lastEjected = now
	n.ejected.Store(true)
	return false
}

// capacity is how many nodes may be ejected at once.
func (s *nodeSet) capacity() int32 {
	tp := s.topo.Load()
	return int32(max(1, int(s.o.MaxEjectedShare*float64(len(tp.nodes)))))
}

func (s *nodeSet) atCap() bool { return s.ejected.Load() >= s.capacity() }

func (s *nodeSet) tryEject() bool {
	c := s.capacity()
	for {
		cur := s.ejected.Load()
		if cur >= c {
			return false
		}
		if s.ejected.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

func (s *nodeSet) maybeProbe(n *node, clock time.Time) {
	n.mu.Lock()
	if n.probing || !n.ej.probeDue(clock) {
		n.mu.Unlock()
		return
	}
	n.probing = true
	n.mu.Unlock()
	if !s.t.goOwned(func() { s.probe(n) }) {
		n.mu.Lock()
		n.probing = false
		n.mu.Unlock()
	}
}

// probe PINGs an ejected node; an answer within ProbeTimeout brings it back.
// A replica that comes back needs a fresh poll before it takes reads.
func (s *nodeSet) probe(n *node) {
	n.probes.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), s.o.ProbeTimeout)
	start := time.Now()
	err := n.client.Do(ctx, n.client.B().Ping().Build()).Error()
	ok := err == nil && time.Since(start) <= s.o.ProbeTimeout
	cancel()
	if !ok {
		n.probeErrs.Add(1)
	}
	n.mu.Lock()
	n.probing = false
	back := n.ej.probed(s.clock(), ok, rand.Float64())
	if back {
		n.replOK = false
		n.lastBad.Store(0)
	}
	n.mu.Unlock()
	if back {
		n.ejected.Store(false)
		s.ejected.Add(-1)
		n.pollNow.Store(true)
		s.assess(n)
	}
}

// suspect reports whether n failed within suspectFor: its reads then run
// under guard (see Tier.guarded).
func (n *node) suspect(now func() time.Time) bool {
	b := n.lastBad.Load()
	return b != 0 && time.Duration(now().UnixNano()-b) < suspectFor
}

// close stops the loop and closes every node's client, which makes calls
// still inside them return. The Tier then waits for its goroutines.
func (s *nodeSet) close() {
	close(s.stop)
	<-s.done
	s.closeAll()
}

func (s *nodeSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	nodes := s.nodes
	s.nodes = map[string]*node{}
	for _, rn := range s.retired {
		nodes[rn.n.addr] = rn.n
	}
	s.retired = map[string]retiredNode{}
	s.mu.Unlock()
	for _, n := range nodes {
		n.close()
	}
}
