// Package redistest starts real redis-server processes for tests.
//
// Each server runs in its own t.TempDir() on a free loopback port chosen by the
// kernel (listen on 127.0.0.1:0, close, start redis-server on that port, and
// retry with another port if a concurrent process took it in between). No
// fixed port and no address other than 127.0.0.1 is ever used, so tests can
// run in parallel with each other and beside a developer's own Redis on 6379.
//
// The handles expose the failures a cache tier has to survive, done to the
// real process rather than mocked: Kill (SIGKILL), Freeze (SIGSTOP: the kernel
// still accepts connections into the listen backlog, the server never
// answers), Thaw (SIGCONT) and Restart (start again with its data files
// deleted, so a replica needs a full resync). Every process is started in its
// own process group and is thawed and killed by t.Cleanup, also when the test
// fails or calls t.FailNow.
//
// redis-server and redis-cli come from Debian's packages
// (scripts/install-test-deps.sh). When they are missing a test fails, never
// skips, so a misconfigured CI cannot go green by skipping every Redis test.
//
// Access locks a server down as production does: a password, ACL users,
// TLS only (with a CA made by NewCA; Debian's redis-server is built with
// TLS). The package's own calls still get through as the default user.
//
// Programs that are not tests (the lab) start the same processes with
// Launch, which returns a Process: the same handle with errors for results
// instead of a testing.TB to fail, closed by the caller. A Server is a
// Process owned by a test. The package imports only the standard library,
// so every module of the repository can use it.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a freshly started server may take to answer
// PING. redis-server is up in a few milliseconds; the margin is for a loaded
// 2-core CI machine.
const startTimeout = 10 * time.Second

// Require fails the test when redis-server or redis-cli is not installed
// (scripts/install-test-deps.sh installs them).
func Require(t testing.TB) {
	t.Helper()
	if err := lookBinaries(); err != nil {
		// Never a skip: a test that proves behaviour against a real server
		// proves nothing without one, and a skipped run looks green.
		t.Fatal("redistest: " + err.Error())
	}
}

// lookBinaries reports a missing redis-server or redis-cli.
func lookBinaries() error {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found (run scripts/install-test-deps.sh): %w", bin, err)
		}
	}
	return nil
}

// Process is one redis-server process. Its methods report failures as
// errors; Launch makes one for a program, which must Close it.
type Process struct {
	dir  string
	port int
	// cluster is non-nil for a Cluster node made by this package: its
	// settings and bus port.
	cluster *clusterNode
	// access is who may connect and how (password, ACL users, TLS).
	access Access
	// extra is added to the command line after the package's own
	// arguments.
	extra []string
	// ownDir: Launch made dir, and Close removes it.
	ownDir bool
	// sentinel: the process runs in sentinel mode on dir's sentinel.conf
	// (sentinel.go), which it rewrites as it learns the group.
	sentinel bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	frozen bool
}

// Server is one redis-server process owned by a test: a Process whose
// Freeze, Thaw, Restart and Start fail the test instead of returning an
// error, and which the test's cleanup kills.
type Server struct {
	*Process
	t testing.TB
}

// Standalone starts a standalone redis-server and returns when it answers
// PING. The server is killed when the test ends.
//
// o is optional (at most one): its Access and Args apply; Dir is ignored,
// the server runs in a directory of the test's.
func Standalone(t testing.TB, o ...Options) *Server {
	t.Helper()
	Require(t)
	var o0 Options
	switch len(o) {
	case 0:
	case 1:
		o0 = o[0]
	default:
		t.Fatal("redistest: Standalone takes at most one Options")
	}
	return newServer(t, nil, o0.Access, o0.Args...)
}

// Options configures Launch. The zero value is a standalone server in a new
// temporary directory.
type Options struct {
	// Dir is the server's working directory (data files and redis.log).
	// Empty means a new temporary directory, which Close removes.
	Dir string

	// Args are added to redis-server's command line, after the package's
	// own (loopback only, the port, no persistence), for example
	// "--cluster-enabled", "yes".
	Args []string

	// Access is the server's password, ACL users and TLS. Default: none.
	Access Access
}

// Launch starts a redis-server on a free loopback port and returns when it
// answers PING. It is for programs; a test uses Standalone or Cluster. The
// caller must Close the process.
func Launch(o Options) (*Process, error) {
	if err := lookBinaries(); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	p := &Process{dir: o.Dir, access: o.Access, extra: o.Args}
	if p.dir == "" {
		dir, err := os.MkdirTemp("", "holdfast-redis-")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		p.dir, p.ownDir = dir, true
	}
	if err := p.startOnFreePort(); err != nil {
		err = fmt.Errorf("redistest: cannot start redis-server: %w\n%s", err, p.logTail())
		if p.ownDir {
			os.RemoveAll(p.dir)
		}
		return nil, err
	}
	return p, nil
}

// testArgs tune the servers of tests: full resyncs straight over the
// socket, without the default 5 s wait for more replicas to join.
var testArgs = []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}

// clusterNode holds what a Cluster node adds to a server's command line.
type clusterNode struct {
	nodeTimeout time.Duration
	busPort     int
}

// newServer creates, starts and registers cleanup for one server; cn is nil
// for a standalone server. args follow testArgs on the command line.
func newServer(t testing.TB, cn *clusterNode, a Access, args ...string) *Server {
	t.Helper()
	extra := append(append([]string(nil), testArgs...), args...)
	s := &Server{Process: &Process{dir: t.TempDir(), cluster: cn, access: a, extra: extra}, t: t}
	t.Cleanup(s.stop)
	if err := s.startOnFreePort(); err != nil {
		t.Fatalf("redistest: cannot start redis-server: %v\n%s", err, s.logTail())
	}
	return s
}

// startOnFreePort starts the process on a port the kernel says is free. A
// free port can be taken by another process between our probe and
// redis-server's bind; a handful of attempts makes that race harmless.
func (p *Process) startOnFreePort() error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		p.port = port
		if p.cluster != nil {
			// The bus port is set explicitly (cluster-port) rather than
			// left at port+10000, which may be taken or above 65535.
			if p.cluster.busPort, err = freePort(); err != nil {
				return err
			}
		}
		if lastErr = p.start(); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

func (s *Process) args() []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no",
		"--protected-mode", "yes",
		// No persistence: the tests want a fast, disposable server, and
		// Restart relies on "no files" meaning "empty".
		"--save", "",
		"--appendonly", "no",
	}
	args = append(args, s.access.args(s.port, s.cluster != nil)...)
	args = append(args, s.extra...)
	if cn := s.cluster; cn != nil {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(cn.busPort),
			"--cluster-node-timeout", strconv.FormatInt(cn.nodeTimeout.Milliseconds(), 10),
			// Let a replica with an old or no copy be promoted at once, and
			// keep serving reads of other slots when some are uncovered.
			"--cluster-replica-validity-factor", "0",
			"--cluster-require-full-coverage", "no",
		)
	}
	return args
}

// start launches the process on s.port and waits until it answers PING. It
// reports an error (and leaves nothing running) if the process exits first,
// typically because the port was taken.
func (s *Process) start() error {
	args := s.args()
	if s.sentinel {
		args = append([]string{filepath.Join(s.dir, sentinelConf), "--sentinel"}, args...)
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.dir
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	// This goroutine is owned by the Process: it ends when the process
	// ends, which stop (run by t.Cleanup, or Close) guarantees.
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.frozen = cmd, exited, false
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		if out, err := s.CLI(ctx, "PING"); err == nil && out == "PONG" {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited during start", s.port)
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v", s.port, startTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Addr returns "127.0.0.1:port".
func (s *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Process) Port() int { return s.port }

// Dir returns the server's working directory (data files and redis.log).
func (s *Process) Dir() string { return s.dir }

// Pid returns the operating-system process id of the server as last
// started, or 0 if it never was. A Restart changes it; after Kill it is the
// id of the exited process. Callers use it to read the process's own
// accounting (CPU time in /proc), which the package does not interpret.
func (s *Process) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the process is started and has not exited; a
// frozen process is running.
func (s *Process) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the server and waits until it has exited. A frozen
// server is killed too (SIGKILL does not need SIGCONT).
func (s *Process) Kill() { s.kill() }

func (s *Process) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.frozen = false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Freeze sends SIGSTOP: the server keeps its sockets, the kernel keeps
// accepting connections into the backlog, and nothing is ever answered until
// Thaw.
func (s *Process) Freeze() error { return s.signal(syscall.SIGSTOP, true) }

// Thaw sends SIGCONT to a frozen server.
func (s *Process) Thaw() error { return s.signal(syscall.SIGCONT, false) }

// Freeze is Process.Freeze, failing the test on an error.
func (s *Server) Freeze() {
	s.t.Helper()
	if err := s.Process.Freeze(); err != nil {
		s.t.Fatal(err)
	}
}

// Thaw is Process.Thaw, failing the test on an error.
func (s *Server) Thaw() {
	s.t.Helper()
	if err := s.Process.Thaw(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *Process) signal(sig syscall.Signal, frozen bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redistest: %s: server not running", s.Addr())
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("redistest: %s: signal %v: %w", s.Addr(), sig, err)
	}
	s.frozen = frozen
	return nil
}

// Restart kills the server, deletes its data files (keeping a Cluster node's
// identity file, nodes.conf, so it rejoins as the same node, and a
// sentinel's sentinel.conf, which is what it knows of its group) and starts it
// again on the same port. It comes back empty: a replica has to do a full
// resync from its primary. Restart returns when the process answers PING; use
// WaitHealthy to wait for the resync.
func (s *Process) Restart() error {
	s.kill()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == "nodes.conf", name == "redis.log", name == sentinelConf:
		default:
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				return fmt.Errorf("redistest: %w", err)
			}
		}
	}
	return s.startAgain("restart")
}

// startAgain starts the killed process again on its port. The port was ours
// a moment ago; another process can still take it in between, and then
// startAgain fails rather than moving the node (a Cluster node's address is
// part of the topology).
func (s *Process) startAgain(what string) error {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.start(); lastErr == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redistest: %s %s: %w\n%s", what, s.Addr(), lastErr, s.logTail())
}

// Restart is Process.Restart, failing the test on an error.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Process.Restart(); err != nil {
		s.t.Fatal(err)
	}
}

// WaitHealthy waits until the server answers PING, and, for a replica, until
// its link to the primary is up and no sync is in progress; in a Cluster,
// until the node reports cluster_state:ok.
func (s *Process) WaitHealthy(ctx context.Context) error {
	for {
		err := s.healthy(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s not healthy: %w (last: %v)", s.Addr(), ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Process) healthy(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	out, err := s.CLI(cctx, "PING")
	if err != nil {
		return err
	}
	if out != "PONG" {
		return fmt.Errorf("PING: %q", out)
	}
	info, err := s.Info(cctx, "replication")
	if err != nil {
		return err
	}
	if info["role"] == "slave" {
		if info["master_link_status"] != "up" || info["master_sync_in_progress"] != "0" {
			return fmt.Errorf("replica not in sync: link %s, sync in progress %s",
				info["master_link_status"], info["master_sync_in_progress"])
		}
	}
	if s.isCluster() {
		ci, err := s.Info(cctx, "cluster-info")
		if err != nil {
			return err
		}
		if ci["cluster_state"] != "ok" {
			return fmt.Errorf("cluster_state %q", ci["cluster_state"])
		}
	}
	return nil
}

func (s *Process) isCluster() bool { return s.cluster != nil }

// CLI runs redis-cli against the server with args and returns its trimmed
// output. It fails fast on a frozen server only as far as ctx allows.
func (s *Process) CLI(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, s.access.cliArgs()...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "redis-cli", full...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	res := strings.TrimSpace(string(out))
	if strings.HasPrefix(res, "ERR ") || strings.HasPrefix(res, "(error)") {
		return res, fmt.Errorf("redis-cli %s: %s", strings.Join(args, " "), res)
	}
	return res, nil
}

// Info returns the "key:value" lines of INFO section as a map. The section
// "cluster-info" runs CLUSTER INFO instead.
func (s *Process) Info(ctx context.Context, section string) (map[string]string, error) {
	var out string
	var err error
	if section == "cluster-info" {
		out, err = s.CLI(ctx, "CLUSTER", "INFO")
	} else {
		out, err = s.CLI(ctx, "INFO", section)
	}
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}

// Close kills the process and removes its directory if Launch made it. It
// is safe to call more than once.
func (s *Process) Close() error {
	s.stop()
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	return nil
}

// stop is the t.Cleanup hook: thaw (so the process can be reaped cleanly and
// nothing waits on a stopped process), then kill the process group.
func (s *Process) stop() {
	s.mu.Lock()
	cmd, frozen := s.cmd, s.frozen
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	if frozen {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	}
	s.kill()
}

// logTail returns the end of the server's log, for failure messages.
func (s *Process) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
