package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The Sentinel shape: a primary with replicas, monitored by Redis
// Sentinel, which promotes a replica when the primary fails. To the tier
// the primary is a standalone server that moves: the breaker and the
// silent-server rule of the standalone shape apply to it, and start over
// when it moves (Breaker.Reset), since the old node's failures say nothing
// of the new one.
//
// The tier finds and follows the primary itself (sentinelClient), not
// with rueidis's SentinelOption, which does part of the job and falls
// short where it counts:
//
//   - It listens for +switch-master on one sentinel. Only the sentinel
//     that led the failover announces it at once; the others learn the
//     new configuration from its hello messages, every 2 s, and announce
//     it then. Listening to one sentinel, a process goes on writing to the
//     old primary for up to 2 s after the switch, and after a manual
//     failover, or one around a primary that only froze for a moment, the
//     old primary is up and acknowledges those writes, which its
//     conversion to a replica then discards: invalidations among them are
//     lost for every other process. The tier subscribes on every sentinel
//     and moves on the first announcement.
//   - It does nothing on a READONLY reply (a primary demoted without this
//     process hearing of it) and offers no way to make it look again; its
//     periodic reconciliation (TopologyRefreshInterval, off by default) is
//     the only way out. The tier looks again at once on READONLY.
//   - It says nothing when it switches, so the breaker and the stream's
//     subscription could not follow.
//
// Going back is guarded: when the tier asks, it takes the naming of the
// highest configuration epoch among all the sentinels, never one older
// than it follows, and it does not return to a primary it moved away from
// on a naming no newer than the move's, nor on an announcement while the
// current primary still answers as a master. Under -race on a saturated
// machine the sentinels were seen naming the old primary, restarted and
// calling itself a master, under the new epoch for over a second.
//
// Replicas take reads by the readiness rule of Cluster replicas
// (readiness.go), with per-node ejection, a replica's miss read again
// from the primary and the primary read for a slot just written
// (sentinel_reads.go); rueidis's SendToReplicas would read from one
// replica picked at random among those the sentinels do not think down,
// whatever its replication state (one in full resync answers empty).
// Reads that go to the primary, and every write, go through this client.
//
// What Sentinel itself cannot promise stands: replication is
// asynchronous, so a write the old primary acknowledged and had not sent
// on when it failed is not on the new one; and between a replica's
// promotion and the leader's announcement (about a second, the sentinel's
// INFO period during a failover) an old primary that is still up takes
// writes that are then lost. For an invalidation that means other
// processes may read the old value from the new primary until its TTL;
// the process that wrote it does not (read-your-invalidations: it reads a
// shared value older than its own invalidation as a miss).

// sentinelBackoff bounds the pause before a sentinel's subscription is
// made again after it broke.
const (
	sentinelBackoff    = 100 * time.Millisecond
	maxSentinelBackoff = time.Second
)

// roleTimeout bounds the ROLE that checks a primary, and each question to
// a sentinel: a frozen node or sentinel costs the resolver this long.
const roleTimeout = 250 * time.Millisecond

// switchMasterChannel is the sentinels' announcement of a failover's end:
// "<master name> <old ip> <old port> <new ip> <new port>".
const switchMasterChannel = "+switch-master"

// primaryConn is the client of one primary.
type primaryConn struct {
	addr   string
	client rueidis.Client
	calls  atomic.Int64 // calls inside client now
}

// use returns pc's client for one call; done must follow the call.
func (pc *primaryConn) use() rueidis.Client {
	pc.calls.Add(1)
	return pc.client
}

func (pc *primaryConn) done() { pc.calls.Add(-1) }

// close closes pc's client, and again once no call is inside it: rueidis
// does not close a connection that a call is dialling while Close runs
// (the dial stores it over the closed one), and such a connection would
// outlive the tier. The calls are bounded by their contexts.
func (pc *primaryConn) close() {
	pc.client.Close()
	for pc.calls.Load() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	pc.client.Close()
}

// sentinelClient is a rueidis.Client that sends every command to the
// primary the sentinels name, and follows it when it moves: on the first
// +switch-master of any sentinel, on a READONLY reply, and every
// Sentinel.RefreshInterval when the primary does not answer ROLE as a
// master. It owns its goroutines (one subscription per sentinel, one
// resolver); Close stops them.
type sentinelClient struct {
	o    Options
	co   rueidis.ClientOption // the primary's, InitAddress set per primary
	cur  atomic.Pointer[primaryConn]
	cmds rueidis.Builder
	// epoch is the least configuration epoch of the primary followed: its
	// naming's when a sentinel was asked, one more than the last when it
	// was announced (a failover raises it). An answer under an older
	// epoch is not followed.
	epoch atomic.Int64
	// left holds the primaries moved away from, with the epoch of the
	// move: resolve does not go back to one under that epoch or an older
	// one.
	left sync.Map // addr -> int64

	// moved is called, on the resolver's goroutine, after each move.
	moved func(addr string)

	announced chan string   // addresses the sentinels announced
	kick      chan struct{} // look again now (a READONLY reply)
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ rueidis.Client = (*sentinelClient)(nil)

// newSentinelClient asks the sentinels for the primary, connects to it and
// starts following it. co is the primary's option (credentials, TLS,
// timeouts); its InitAddress is ignored.
func newSentinelClient(o Options, co rueidis.ClientOption, moved func(addr string)) (*sentinelClient, error) {
	co.ForceSingleClient = true
	s := &sentinelClient{
		o: o, co: co, moved: moved,
		announced: make(chan string, 16),
		kick:      make(chan struct{}, 1),
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.DialTimeout)
	defer cancel()
	pc, epoch, err := s.resolve(ctx, "")
	if err != nil {
		return nil, err
	}
	s.cur.Store(pc)
	s.epoch.Store(epoch)
	s.cmds = pc.client.B()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for _, addr := range o.Sentinel.Addrs {
		s.wg.Add(1)
		go s.listen(addr)
	}
	s.wg.Add(1)
	go s.run()
	return s, nil
}

// sentinelOption is the client option of one sentinel.
func (s *sentinelClient) sentinelOption(addr string) rueidis.ClientOption {
	co := rueidis.ClientOption{
		InitAddress:       []string{addr},
		Username:          s.o.Sentinel.Username,
		Password:          s.o.Sentinel.Password,
		TLSConfig:         s.o.Sentinel.TLS,
		ConnWriteTimeout:  s.o.PingTimeout,
		DisableCache:      true,
		DisableRetry:      true,
		ForceSingleClient: true,
	}
	co.Dialer.Timeout = s.o.DialTimeout
	return co
}

// named is a primary as one sentinel names it, with the configuration
// epoch of that naming: each failover gives its new primary a higher one.
type named struct {
	addr  string
	epoch int64
}

// askSentinel returns the primary as the sentinel at addr names it
// (SENTINEL MASTER).
func (s *sentinelClient) askSentinel(ctx context.Context, addr string) (named, error) {
	c, err := rueidis.NewClient(s.sentinelOption(addr))
	if err != nil {
		return named{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, roleTimeout)
	defer cancel()
	// rueidis has no builder for SENTINEL MASTER.
	m, err := c.Do(ctx, c.B().Arbitrary("SENTINEL", "MASTER").Args(s.o.Sentinel.MasterName).Build()).AsStrMap()
	if err != nil {
		return named{}, err
	}
	epoch, err := strconv.ParseInt(m["config-epoch"], 10, 64)
	if err != nil || m["ip"] == "" || m["port"] == "" {
		return named{}, fmt.Errorf("sentinel %s: no address or configuration epoch for master %q", addr, s.o.Sentinel.MasterName)
	}
	return named{addr: net.JoinHostPort(m["ip"], m["port"]), epoch: epoch}, nil
}

// resolve asks every sentinel for the primary and takes the naming of the
// highest configuration epoch, no lower than the one followed now: a
// sentinel that has not yet heard of the last failover names the old
// primary under an older epoch, and an old primary restarted calls itself
// a master until the sentinels convert it, so the first answer alone could
// send the tier back to it. It connects to the primary so named unless it
// is skip, and checks that it answers ROLE as a master.
func (s *sentinelClient) resolve(ctx context.Context, skip string) (*primaryConn, int64, error) {
	var errs []error
	best := named{epoch: -1}
	for _, sa := range s.o.Sentinel.Addrs {
		if ctx.Err() != nil {
			break
		}
		n, err := s.askSentinel(ctx, sa)
		if err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s: %w", sa, err))
			continue
		}
		if n.epoch > best.epoch {
			best = n
		}
	}
	switch {
	case best.epoch < 0:
		return nil, 0, errors.Join(errs...)
	case best.epoch < s.epoch.Load():
		return nil, 0, fmt.Errorf("the sentinels name %s under epoch %d, older than the %d followed", best.addr, best.epoch, s.epoch.Load())
	case best.addr == skip:
		return nil, 0, fmt.Errorf("the sentinels name %s, the primary followed", skip)
	}
	if e, ok := s.left.Load(best.addr); ok && best.epoch <= e.(int64) {
		// An old primary, restarted, calls itself a master, and has
		// been seen named again under the epoch the tier left it at: it
		// is followed again only when an announcement names it.
		return nil, 0, fmt.Errorf("the sentinels name %s under epoch %d, a primary left at epoch %d", best.addr, best.epoch, e.(int64))
	}
	pc, err := s.connect(ctx, best.addr)
	if err != nil {
		return nil, 0, fmt.Errorf("primary %s: %w", best.addr, err)
	}
	return pc, best.epoch, nil
}

// errNotPrimary is a node named the primary that reports another role.
var errNotPrimary = errors.New("redis tier: the node named the primary reports itself a replica")

// connect makes a client of addr and checks that it is a master.
func (s *sentinelClient) connect(ctx context.Context, addr string) (*primaryConn, error) {
	co := s.co
	co.InitAddress = []string{addr}
	c, err := rueidis.NewClient(co)
	if err != nil {
		return nil, err
	}
	if err := isMaster(ctx, c); err != nil {
		c.Close()
		return nil, err
	}
	return &primaryConn{addr: addr, client: c}, nil
}

// isMaster asks c's node for its ROLE.
func isMaster(ctx context.Context, c rueidis.Client) error {
	ctx, cancel := context.WithTimeout(ctx, roleTimeout)
	defer cancel()
	role, err := c.Do(ctx, c.B().Role().Build()).ToArray()
	if err != nil {
		return err
	}
	if len(role) == 0 {
		return errNotPrimary
	}
	if r, _ := role[0].ToString(); r != "master" {
		return errNotPrimary
	}
	return nil
}

// listen subscribes to +switch-master on the sentinel at addr until Close,
// again after each break.
func (s *sentinelClient) listen(addr string) {
	defer s.wg.Done()
	wait := sentinelBackoff
	for s.ctx.Err() == nil {
		if c, err := rueidis.NewClient(s.sentinelOption(addr)); err == nil {
			err = c.Receive(s.ctx, c.B().Subscribe().Channel(switchMasterChannel).Build(), func(m rueidis.PubSubMessage) {
				f := strings.Fields(m.Message)
				if len(f) == 5 && f[0] == s.o.Sentinel.MasterName {
					select {
					case s.announced <- net.JoinHostPort(f[3], f[4]):
					default: // the resolver is behind: it looks again anyway
						s.lookAgain()
					}
				}
			})
			c.Close()
			if err == nil {
				wait = sentinelBackoff
			}
		}
		timer := time.NewTimer(wait/2 + rand.N(wait))
		select {
		case <-s.ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		wait = min(2*wait, maxSentinelBackoff)
	}
}

// lookAgain asks the resolver to check the primary now.
func (s *sentinelClient) lookAgain() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the resolver: it moves to an announced primary at once, and on
// a kick or every RefreshInterval checks that the current one still
// answers ROLE as a master, asking the sentinels when it does not. A node
// that the sentinels name but that still calls itself a replica is tried
// again on the next round.
func (s *sentinelClient) run() {
	defer s.wg.Done()
	tick := time.NewTicker(s.o.Sentinel.RefreshInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case addr := <-s.announced:
			if _, left := s.left.Load(addr); left {
				// Back to a primary moved away from: only when the
				// current one no longer answers as a master, and then
				// under a newer epoch (check, resolve).
				s.check()
				continue
			}
			if addr != s.cur.Load().addr {
				ctx, cancel := context.WithTimeout(s.ctx, s.o.DialTimeout)
				pc, err := s.connect(ctx, addr)
				cancel()
				if err != nil {
					s.lookAgain() // not a master yet, or not reachable: the sentinels are asked
					continue
				}
				s.move(pc, s.epoch.Load()+1)
			}
		case <-s.kick:
			s.check()
		case <-tick.C:
			s.check()
		}
	}
}

// check moves to the primary the sentinels name when the current one does
// not answer ROLE as a master.
func (s *sentinelClient) check() {
	cur := s.cur.Load()
	if isMaster(s.ctx, cur.client) == nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.o.DialTimeout)
	defer cancel()
	if pc, epoch, err := s.resolve(ctx, cur.addr); err == nil {
		s.move(pc, epoch)
	}
}

// move makes pc, of configuration epoch at least epoch, the primary, then
// closes the old one's client, on a goroutine Close waits for: calls still
// on it fail, and their outcomes, of the breaker's old generation, are not
// counted.
func (s *sentinelClient) move(pc *primaryConn, epoch int64) {
	if s.ctx.Err() != nil {
		pc.close()
		return
	}
	s.epoch.Store(epoch)
	old := s.cur.Swap(pc)
	s.left.Store(old.addr, epoch)
	s.left.Delete(pc.addr)
	s.moved(pc.addr)
	// On a goroutine of its own: a client of a primary that stopped
	// answering takes about a second a connection to close, and the
	// resolver must be free to follow the next move meanwhile.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		old.close()
	}()
}

// Primary returns the current primary's address.
func (s *sentinelClient) primary() string { return s.cur.Load().addr }

// readOnly reports whether err is a READONLY reply; it sets the resolver
// looking again when it is.
func (s *sentinelClient) readOnly(err error) {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "READONLY") {
		s.lookAgain()
	}
}

func (s *sentinelClient) B() rueidis.Builder { return s.cmds }

func (s *sentinelClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	pc := s.cur.Load()
	r := pc.use().Do(ctx, cmd)
	pc.done()
	if err := r.Error(); err != nil {
		s.readOnly(err)
	}
	return r
}

func (s *sentinelClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	pc := s.cur.Load()
	rs := pc.use().DoMulti(ctx, multi...)
	pc.done()
	for _, r := range rs {
		if err := r.Error(); err != nil {
			s.readOnly(err)
			break
		}
	}
	return rs
}

func (s *sentinelClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	pc := s.cur.Load()
	defer pc.done()
	return pc.use().DoCache(ctx, cmd, ttl)
}

func (s *sentinelClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	pc := s.cur.Load()
	defer pc.done()
	return pc.use().DoMultiCache(ctx, multi...)
}

// The tier makes none of the calls below; they pass to the primary's
// client uncounted, so a move may close it under them.

func (s *sentinelClient) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	return s.cur.Load().client.DoStream(ctx, cmd)
}

func (s *sentinelClient) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	return s.cur.Load().client.DoMultiStream(ctx, multi...)
}

func (s *sentinelClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	return s.cur.Load().client.Receive(ctx, subscribe, fn)
}

func (s *sentinelClient) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	return s.cur.Load().client.Dedicated(fn)
}

func (s *sentinelClient) Dedicate() (rueidis.DedicatedClient, func()) {
	return s.cur.Load().client.Dedicate()
}

func (s *sentinelClient) Nodes() map[string]rueidis.Client {
	pc := s.cur.Load()
	return map[string]rueidis.Client{pc.addr: pc.client}
}

func (s *sentinelClient) Mode() rueidis.ClientMode { return rueidis.ClientModeSentinel }

// Close stops the subscriptions and the resolver, then closes the
// primary's client.
func (s *sentinelClient) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.cur.Load().close()
	})
}

// Primary returns the address of the primary the tier reads and writes:
// the server's in the standalone shape, "" in a Cluster, and in the
// Sentinel shape the one it follows now.
func (t *Tier) Primary() string {
	switch {
	case t.sentinel != nil:
		return t.sentinel.primary()
	case t.cluster:
		return ""
	}
	return t.opts.Addrs[0]
}

// primaryMoves returns a channel closed at the tier's next move to a new
// primary (primaryMoved).
func (t *Tier) primaryMoves() <-chan struct{} {
	for {
		if ch := t.moved.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if t.moved.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// primaryMoved is what the tier does when it has moved to the primary at
// addr, which answered ROLE as a master just now: the breaker starts over,
// and the stream's subscription moves.
func (t *Tier) primaryMoved(addr string) {
	t.lastAnswer.Store(t.opts.Clock.Now().UnixNano())
	t.br.Reset()
	next := make(chan struct{})
	if ch := t.moved.Swap(&next); ch != nil {
		close(*ch)
	}
	t.stats.primaryMoves.add(1)
	if rs := t.reps.Load(); rs != nil {
		rs.kickTopology() // the replicas are the new primary's
	}
	t.opts.Logger.Info("redis tier: following the sentinels to a new primary", "master", t.opts.Sentinel.MasterName, "primary", addr)
}
