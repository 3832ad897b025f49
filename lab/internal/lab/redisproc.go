package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The lab is a command, not a test, so it starts its own redis-server
// processes with a plain error-returning API. internal/redistest does the same
// for tests (taking *testing.T); the two could share a core later.
//
// Servers listen on 127.0.0.1 only, on a port the kernel chose free, with no
// persistence, in their own temporary directory; they never touch 6379.

// RedisServerPath is the redis-server binary; redis-cli is looked up beside
// it first, then on PATH.
var RedisServerPath = "redis-server"

// Server is one redis-server process that can be frozen, thawed, killed and
// restarted empty on the same port.
type Server struct {
	Addr string // 127.0.0.1:port
	port int
	dir  string
	args []string

	mu   sync.Mutex
	proc *process // nil while killed
}

// process owns one started redis-server and the goroutine that reaps it.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when Wait returned
}

// StartServer starts a standalone redis-server. extra arguments are added to
// the command line (for example "--cluster-enabled", "yes").
func StartServer(ctx context.Context, extra ...string) (*Server, error) {
	if _, err := exec.LookPath(RedisServerPath); err != nil {
		return nil, fmt.Errorf("redis-server not found (install it with scripts/install-test-deps.sh): %w", err)
	}
	var lastErr error
	// A port found free can be taken by someone else before redis-server
	// binds it; try a few ports before giving up.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "holdfast-lab-redis-")
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"),
		}, extra...)
		if err := s.start(ctx); err != nil {
			lastErr = err
			os.RemoveAll(dir)
			continue
		}
		return s, nil
	}
	return nil, fmt.Errorf("start redis-server: %w", lastErr)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command(RedisServerPath, s.args...)
	cmd.Dir = s.dir
	setParentDeath(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	if err := waitPing(ctx, s.Addr, p.exited, 5*time.Second); err != nil {
		s.Kill()
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		return fmt.Errorf("redis-server on %s: %w; log: %s", s.Addr, err, lastLines(string(log), 5))
	}
	return nil
}

func waitPing(ctx context.Context, addr string, exited <-chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if r, err := Command(addr, 200*time.Millisecond, "PING"); err == nil && r == "PONG" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("exited before answering PING")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("no PONG within %v", limit)
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return fmt.Errorf("redis-server %s is not running", s.Addr)
	}
	return s.proc.cmd.Process.Signal(sig)
}

// Freeze stops the process with SIGSTOP: the kernel still accepts
// connections, and nothing answers — the worst kind of failure for a client.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process with SIGCONT.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL and waits for it; connections are
// refused until Restart.
func (s *Server) Kill() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return nil
}

// Restart kills the process if it runs and starts a new, empty one on the
// same port.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.start(ctx)
}

// Running reports whether a process is started (frozen counts as running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Close kills the process and removes its directory.
func (s *Server) Close() error {
	err := s.Kill()
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// Command sends one command over a fresh connection and returns the reply as
// text: the lab's own probes (PING, INFO, CLUSTER INFO) must not go through
// the client under test, and a frozen server must not hang them.
func Command(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// readReply reads one RESP2 reply: simple string, error, integer or bulk
// string; arrays are joined by newlines (enough for the probes).
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 || n > 1<<16 {
			return "", fmt.Errorf("bad array reply %q", line)
		}
		parts := make([]string, 0, n)
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// InfoField returns one field of INFO section from addr.
func InfoField(addr, section, field string) (string, error) {
	info, err := Command(addr, 300*time.Millisecond, "INFO", section)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s of %s has no %s", section, addr, field)
}

// CommandsProcessed returns total_commands_processed of the server at addr.
func CommandsProcessed(addr string) (int64, error) {
	v, err := InfoField(addr, "stats", "total_commands_processed")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
