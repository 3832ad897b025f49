package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sentinelConf is a sentinel's configuration file in its directory. A
// sentinel must have one it can write: it records there what it learns of
// its group (replicas, other sentinels, the current primary).
const sentinelConf = "sentinel.conf"

// SentinelConfig configures a Sentinel group. The zero value is one
// primary, two replicas and three sentinels with a quorum of two, which
// fail a primary over about a second after it stops answering.
type SentinelConfig struct {
	// MasterName is the name the sentinels monitor the primary under.
	// Default "holdfast".
	MasterName string
	// Replicas is the number of replicas of the primary. Default 2.
	Replicas int
	// Sentinels is the number of sentinels. Default 3.
	Sentinels int
	// Quorum is how many sentinels must agree that the primary is down.
	// Default: a majority of Sentinels.
	Quorum int
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// primary may go unanswered before a sentinel thinks it down. Default
	// 1 s (Redis's own is 30 s), so that a test's failover takes seconds.
	DownAfter time.Duration
	// FailoverTimeout is the sentinels' failover-timeout: the most a
	// failover may take before another is tried, and how long the other
	// replicas have to follow the new primary. Default 2 s (Redis's own is
	// 3 minutes).
	FailoverTimeout time.Duration
	// Access applies to the primary and replicas: with a Password the
	// replicas authenticate to their primary with it (masterauth) and the
	// sentinels to every one of them (auth-pass). TLS is not supported.
	Access Access
	// SentinelPassword, when set, is the sentinels' own password
	// (requirepass in sentinel mode). Default: none.
	SentinelPassword string
}

// SentinelGroup is a primary with its replicas and the sentinels that
// monitor them: Servers owned by a test (Sentinel), or Processes a program
// closes (LaunchSentinel).
type SentinelGroup[S member] struct {
	cfg       SentinelConfig
	nodes     []S // the primary at start first, then the replicas
	sentinels []S
}

// member is what a SentinelGroup is made of: *Server or *Process.
type member interface {
	comparable
	process() *Process
}

func (s *Server) process() *Process  { return s.Process }
func (p *Process) process() *Process { return p }

// Sentinel starts a Sentinel group and returns when every replica is in
// sync and every sentinel knows every replica and every other sentinel, so
// that a failover can start at once. It is killed when the test ends.
func Sentinel(t testing.TB, cfg ...SentinelConfig) *SentinelGroup[*Server] {
	t.Helper()
	Require(t)
	var c SentinelConfig
	switch len(cfg) {
	case 0:
	case 1:
		c = cfg[0]
	default:
		t.Fatal("redistest: Sentinel takes at most one SentinelConfig")
	}
	c, err := c.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g := &SentinelGroup[*Server]{cfg: c}
	primary := newServer(t, nil, c.Access, c.nodeArgs(0)...)
	g.nodes = append(g.nodes, primary)
	for range c.Replicas {
		g.nodes = append(g.nodes, newServer(t, nil, c.Access, c.nodeArgs(primary.Port())...))
	}
	conf := c.sentinelConfig(primary.Port())
	for range c.Sentinels {
		g.sentinels = append(g.sentinels, newSentinel(t, conf, Access{Password: c.SentinelPassword}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := g.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

// LaunchSentinel starts a Sentinel group for a program, as Sentinel does
// for a test, and returns when it has settled. The caller must Close it.
func LaunchSentinel(ctx context.Context, c SentinelConfig) (_ *SentinelGroup[*Process], err error) {
	if c, err = c.withDefaults(); err != nil {
		return nil, err
	}
	if err := lookBinaries(); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	g := &SentinelGroup[*Process]{cfg: c}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	primary, err := Launch(Options{Access: c.Access, Args: append(append([]string(nil), testArgs...), c.nodeArgs(0)...)})
	if err != nil {
		return nil, err
	}
	g.nodes = append(g.nodes, primary)
	for range c.Replicas {
		n, err := Launch(Options{Access: c.Access, Args: append(append([]string(nil), testArgs...), c.nodeArgs(primary.Port())...)})
		if err != nil {
			return nil, err
		}
		g.nodes = append(g.nodes, n)
	}
	conf := c.sentinelConfig(primary.Port())
	for range c.Sentinels {
		dir, err := os.MkdirTemp("", "holdfast-sentinel-")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		p := &Process{dir: dir, ownDir: true, access: Access{Password: c.SentinelPassword}, sentinel: true}
		g.sentinels = append(g.sentinels, p)
		if err := os.WriteFile(filepath.Join(dir, sentinelConf), []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		if err := p.startOnFreePort(); err != nil {
			return nil, fmt.Errorf("redistest: cannot start a sentinel: %w\n%s", err, p.logTail())
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := g.WaitSettled(sctx); err != nil {
		return nil, err
	}
	return g, nil
}

// Close kills every process of a launched group and removes its
// directories.
func (g *SentinelGroup[S]) Close() error {
	var errs []error
	for _, p := range append(append([]S(nil), g.sentinels...), g.nodes...) {
		errs = append(errs, p.process().Close())
	}
	return errors.Join(errs...)
}

// withDefaults validates c and fills in the defaults.
func (c SentinelConfig) withDefaults() (SentinelConfig, error) {
	if c.Access.TLS != nil {
		return c, errors.New("redistest: Sentinel groups over TLS are not supported")
	}
	if c.MasterName == "" {
		c.MasterName = "holdfast"
	}
	if c.Replicas == 0 {
		c.Replicas = 2
	}
	if c.Sentinels == 0 {
		c.Sentinels = 3
	}
	if c.Quorum == 0 {
		c.Quorum = c.Sentinels/2 + 1
	}
	if c.DownAfter <= 0 {
		c.DownAfter = time.Second
	}
	if c.FailoverTimeout <= 0 {
		c.FailoverTimeout = 2 * time.Second
	}
	return c, nil
}

// nodeArgs are a node's own arguments: a replica's of the primary on
// primaryPort, the primary's with primaryPort 0.
func (c SentinelConfig) nodeArgs(primaryPort int) []string {
	var args []string
	if primaryPort != 0 {
		args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(primaryPort)}
	}
	if c.Access.Password != "" {
		args = append(args, "--masterauth", c.Access.Password)
	}
	return args
}

// sentinelConfig is the sentinel.conf every sentinel starts from.
func (c SentinelConfig) sentinelConfig(primaryPort int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", c.MasterName, primaryPort, c.Quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", c.MasterName, c.DownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", c.MasterName, c.FailoverTimeout.Milliseconds())
	fmt.Fprintf(&b, "sentinel parallel-syncs %s %d\n", c.MasterName, c.Replicas)
	if c.Access.Password != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", c.MasterName, c.Access.Password)
	}
	if c.SentinelPassword != "" {
		// What a sentinel gives the others when it asks them to vote.
		fmt.Fprintf(&b, "sentinel sentinel-pass %s\n", c.SentinelPassword)
	}
	return b.String()
}

// newSentinel starts one sentinel with conf as its sentinel.conf.
func newSentinel(t testing.TB, conf string, a Access) *Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, sentinelConf), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Server{Process: &Process{dir: dir, access: a, sentinel: true}, t: t}
	t.Cleanup(s.stop)
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("redistest: cannot start a sentinel: %v\n%s", err, s.logTail())
	}
	return s
}

// MasterName returns the name the sentinels monitor the primary under.
func (g *SentinelGroup[S]) MasterName() string { return g.cfg.MasterName }

// Nodes returns the primary and replicas, the primary at start first.
// Which is the primary changes with each failover; see Primary.
func (g *SentinelGroup[S]) Nodes() []S { return g.nodes }

// Sentinels returns the sentinels.
func (g *SentinelGroup[S]) Sentinels() []S { return g.sentinels }

// SentinelAddrs returns the sentinels' addresses.
func (g *SentinelGroup[S]) SentinelAddrs() []string {
	addrs := make([]string, len(g.sentinels))
	for i, s := range g.sentinels {
		addrs[i] = s.process().Addr()
	}
	return addrs
}

// node returns the node listening on addr.
func (g *SentinelGroup[S]) node(addr string) (S, bool) {
	for _, n := range g.nodes {
		if n.process().Addr() == addr {
			return n, true
		}
	}
	var none S
	return none, false
}

// master returns what sentinel s reports of the group's primary (the
// fields of SENTINEL MASTER).
func (g *SentinelGroup[S]) master(ctx context.Context, s *Process) (map[string]string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out, err := s.CLI(cctx, "SENTINEL", "MASTER", g.cfg.MasterName)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(out, "\n")
	m := make(map[string]string, len(lines)/2)
	for i := 0; i+1 < len(lines); i += 2 {
		m[strings.TrimSpace(lines[i])] = strings.TrimSpace(lines[i+1])
	}
	return m, nil
}

// up reports whether p is running and not frozen.
func up(p *Process) bool { return p.Running() && !p.frozenNow() }

// Primary returns the node the first answering sentinel calls the primary.
func (g *SentinelGroup[S]) Primary(ctx context.Context) (S, error) {
	var none S
	var last error
	for _, s := range g.sentinels {
		m, err := g.master(ctx, s.process())
		if err != nil {
			last = err
			continue
		}
		addr := m["ip"] + ":" + m["port"]
		if n, ok := g.node(addr); ok {
			return n, nil
		}
		return none, fmt.Errorf("redistest: sentinel %s names %s the primary, not a node of the group", s.process().Addr(), addr)
	}
	return none, fmt.Errorf("redistest: no sentinel answers: %v", last)
}

// WaitPrimary waits until every running sentinel names the same primary,
// other than every node in not, and that node reports itself a master, and
// returns it.
func (g *SentinelGroup[S]) WaitPrimary(ctx context.Context, not ...S) (S, error) {
	var last error
	for {
		p, err := g.agreedPrimary(ctx, not)
		if err == nil {
			return p, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("redistest: no new primary: %w (last: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// FirstNewPrimary waits until a running sentinel (the failover's leader,
// first of all) names a primary other than every node in not, and that
// node reports itself a master, and returns it: the moment the sentinels
// announce the failover (+switch-master), while the others may still name
// the old primary until they hear of it.
func (g *SentinelGroup[S]) FirstNewPrimary(ctx context.Context, not ...S) (S, error) {
	for {
		for _, s := range g.sentinels {
			if !up(s.process()) {
				continue
			}
			m, err := g.master(ctx, s.process())
			if err != nil {
				continue
			}
			n, ok := g.node(m["ip"] + ":" + m["port"])
			if !ok || slices.Contains(not, n) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			info, err := n.process().Info(cctx, "replication")
			cancel()
			if err == nil && info["role"] == "master" {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			var none S
			return none, fmt.Errorf("redistest: no sentinel names a new primary: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (g *SentinelGroup[S]) agreedPrimary(ctx context.Context, not []S) (S, error) {
	var p, none S
	found := false
	for _, s := range g.sentinels {
		if !up(s.process()) {
			continue
		}
		m, err := g.master(ctx, s.process())
		if err != nil {
			return none, err
		}
		n, ok := g.node(m["ip"] + ":" + m["port"])
		if !ok || (found && n != p) {
			return none, fmt.Errorf("sentinels disagree or name no node (%s:%s)", m["ip"], m["port"])
		}
		p, found = n, true
	}
	if !found {
		return none, fmt.Errorf("no sentinel running")
	}
	if slices.Contains(not, p) {
		return none, fmt.Errorf("still %s", p.process().Addr())
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := p.process().Info(cctx, "replication")
	if err != nil {
		return none, err
	}
	if info["role"] != "master" {
		return none, fmt.Errorf("%s reports role %s", p.process().Addr(), info["role"])
	}
	return p, nil
}

// frozenNow reports whether the process is frozen.
func (s *Process) frozenNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.frozen
}

// Failover asks a running sentinel for a failover (SENTINEL FAILOVER),
// which promotes a replica without waiting for the primary to fail.
func (g *SentinelGroup[S]) Failover(ctx context.Context) error {
	var last error
	for _, s := range g.sentinels {
		if !up(s.process()) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := s.process().CLI(cctx, "SENTINEL", "FAILOVER", g.cfg.MasterName)
		cancel()
		if err == nil {
			return nil
		}
		last = err
	}
	return fmt.Errorf("redistest: SENTINEL FAILOVER: %v", last)
}

// WaitSettled waits until every running node answers and every other node
// is a replica of the primary in sync, and every running sentinel agrees on
// the primary, sees it up, and knows of at least as many replicas and
// other sentinels as are running: a failover can start at once.
func (g *SentinelGroup[S]) WaitSettled(ctx context.Context) error {
	var last error
	for {
		if last = g.settled(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: sentinel group not settled: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (g *SentinelGroup[S]) settled(ctx context.Context) error {
	ps, err := g.agreedPrimary(ctx, nil)
	if err != nil {
		return err
	}
	p := ps.process()
	nodes, sentinels := 0, 0
	for _, ns := range g.nodes {
		n := ns.process()
		if !up(n) {
			continue
		}
		nodes++
		if err := n.healthy(ctx); err != nil {
			return err
		}
		if n == p {
			continue
		}
		// A node back after a failover calls itself a master until the
		// sentinels convert it.
		if info, err := n.Info(ctx, "replication"); err != nil || info["role"] != "slave" ||
			info["master_port"] != strconv.Itoa(p.Port()) {
			return fmt.Errorf("%s not yet a replica of %s (%v)", n.Addr(), p.Addr(), err)
		}
	}
	for _, s := range g.sentinels {
		if up(s.process()) {
			sentinels++
		}
	}
	for _, s := range g.sentinels {
		if !up(s.process()) {
			continue
		}
		m, err := g.master(ctx, s.process())
		if err != nil {
			return err
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: primary %s flags %q", s.process().Addr(), p.Addr(), m["flags"])
		}
		// A sentinel keeps counting a replica or sentinel that went away.
		ns, _ := strconv.Atoi(m["num-slaves"])
		nos, _ := strconv.Atoi(m["num-other-sentinels"])
		if ns < nodes-1 || nos < sentinels-1 {
			return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels, want %d and %d",
				s.process().Addr(), m["num-slaves"], m["num-other-sentinels"], nodes-1, sentinels-1)
		}
	}
	return nil
}
