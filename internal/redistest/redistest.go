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
// (scripts/install-test-deps.sh). When they are missing a test skips, except
// under CI (CI=true) where it fails, so a misconfigured CI cannot go green by
// skipping every Redis test.
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

// Require skips the test when redis-server or redis-cli is not installed, or
// fails it when the environment variable CI is "true" (or "1"): in CI a
// missing server is a broken setup, not a reason to skip.
func Require(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("redistest: %s not found (run scripts/install-test-deps.sh): %v", bin, err)
			if ci := os.Getenv("CI"); ci == "true" || ci == "1" {
				t.Fatal(msg)
			} else {
				t.Skip(msg)
			}
			return
		}
	}
}

// Server is one redis-server process owned by a test.
type Server struct {
	t    testing.TB
	dir  string
	port int
	// cluster is non-nil for a Cluster node: its settings and bus port.
	cluster *clusterNode

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	frozen bool
}

// Standalone starts a standalone redis-server and returns when it answers
// PING. The server is killed when the test ends.
func Standalone(t testing.TB) *Server {
	t.Helper()
	Require(t)
	return newServer(t, nil)
}

// clusterNode holds what a Cluster node adds to a server's command line.
type clusterNode struct {
	nodeTimeout time.Duration
	busPort     int
}

// newServer creates, starts and registers cleanup for one server; cn is nil
// for a standalone server.
func newServer(t testing.TB, cn *clusterNode) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), cluster: cn}
	t.Cleanup(s.stop)
	var lastErr error
	// A free port can be taken by another process between our probe and
	// redis-server's bind; a handful of attempts makes that race harmless.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.port = port
		if cn != nil {
			// The bus port is set explicitly (cluster-port) rather than
			// left at port+10000, which may be taken or above 65535.
			if cn.busPort, err = freePort(); err != nil {
				t.Fatalf("redistest: %v", err)
			}
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: cannot start redis-server: %v\n%s", lastErr, s.logTail())
	return nil
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

func (s *Server) args() []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no",
		"--protected-mode", "yes",
		// No persistence: the tests want a fast, disposable server, and
		// Restart relies on "no files" meaning "empty".
		"--save", "",
		"--appendonly", "no",
		// Full resyncs straight over the socket, without the default 5 s
		// wait for more replicas to join.
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
	}
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
func (s *Server) start() error {
	cmd := exec.Command("redis-server", s.args()...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group, so signals reach the server and nothing else,
		// and Pdeathsig so a crashed test binary does not leak servers.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	// This goroutine is owned by the Server: it ends when the process ends,
	// which stop (run by t.Cleanup) guarantees.
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
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (data files and redis.log).
func (s *Server) Dir() string { return s.dir }

// Kill sends SIGKILL to the server and waits until it has exited. A frozen
// server is killed too (SIGKILL does not need SIGCONT).
func (s *Server) Kill() {
	s.t.Helper()
	s.kill()
}

func (s *Server) kill() {
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
func (s *Server) Freeze() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP, true)
}

// Thaw sends SIGCONT to a frozen server.
func (s *Server) Thaw() {
	s.t.Helper()
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, frozen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %s: server not running", s.Addr())
	}
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil {
		s.t.Fatalf("redistest: %s: signal %v: %v", s.Addr(), sig, err)
	}
	s.frozen = frozen
}

// Restart kills the server, deletes its data files (keeping a Cluster node's
// identity file, nodes.conf, so it rejoins as the same node) and starts it
// again on the same port. It comes back empty: a replica has to do a full
// resync from its primary. Restart returns when the process answers PING; use
// WaitHealthy to wait for the resync.
func (s *Server) Restart() {
	s.t.Helper()
	s.kill()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == "nodes.conf", name == "redis.log":
		default:
			if err := os.RemoveAll(filepath.Join(s.dir, name)); err != nil {
				s.t.Fatalf("redistest: %v", err)
			}
		}
	}
	// The port was ours a moment ago; another process can still take it in
	// between, and then the test fails rather than moving the node (a
	// Cluster node's address is part of the topology).
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		if lastErr = s.start(); lastErr == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart %s: %v\n%s", s.Addr(), lastErr, s.logTail())
}

// WaitHealthy waits until the server answers PING, and, for a replica, until
// its link to the primary is up and no sync is in progress; in a Cluster,
// until the node reports cluster_state:ok.
func (s *Server) WaitHealthy(ctx context.Context) error {
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

func (s *Server) healthy(ctx context.Context) error {
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

func (s *Server) isCluster() bool { return s.cluster != nil }

// CLI runs redis-cli against the server with args and returns its trimmed
// output. It fails fast on a frozen server only as far as ctx allows.
func (s *Server) CLI(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)
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
func (s *Server) Info(ctx context.Context, section string) (map[string]string, error) {
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

// stop is the t.Cleanup hook: thaw (so the process can be reaped cleanly and
// nothing waits on a stopped process), then kill the process group.
func (s *Server) stop() {
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
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
