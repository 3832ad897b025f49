package redistest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestStandaloneLifecycle(t *testing.T) {
	s := Standalone(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() == 6379 {
		t.Fatalf("Addr = %s, want a free loopback port", s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.CLI(ctx, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}

	// Frozen: the kernel still accepts the connection, nothing answers.
	s.Freeze()
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial frozen server: %v", err)
	}
	_, _ = c.Write([]byte("PING\r\n"))
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatalf("frozen server answered %d bytes", n)
	}
	_ = c.Close()
	s.Thaw()
	if err := s.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.CLI(ctx, "GET", "k"); v != "v" {
		t.Fatalf("GET k after thaw = %q", v)
	}

	// Restart comes back empty on the same port.
	s.Restart()
	if v, _ := s.CLI(ctx, "GET", "k"); v != "" {
		t.Fatalf("GET k after restart = %q, want empty", v)
	}

	s.Kill()
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("killed server still accepts connections")
	}
}

// TestCleanupFrozen leaves a server frozen; the cleanup must still end it.
func TestCleanupFrozen(t *testing.T) {
	var s *Server
	t.Run("frozen", func(t *testing.T) {
		s = Standalone(t)
		s.Freeze()
	})
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("frozen server still running after its test's cleanup")
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start takes seconds")
	}
	c := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got := len(c.Primaries(ctx)); got != 3 {
		t.Fatalf("primaries = %d, want 3", got)
	}
	replicas := c.Replicas(ctx)
	if len(replicas) != 3 {
		t.Fatalf("replicas = %d, want 3", len(replicas))
	}
	n, err := c.NodeFor(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.CLI(ctx, "SET", "foo", "bar"); err != nil {
		t.Fatal(err)
	}
	// A replica restarted empty does a full resync and becomes healthy again.
	r := replicas[0]
	r.Restart()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClusterFailover: a killed primary is replaced by its replica within a
// few node timeouts, and the old primary restarted empty rejoins as a
// replica after a full resync.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster failover takes seconds")
	}
	c := Cluster(t, ClusterConfig{NodeTimeout: 500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	p, err := c.NodeFor(ctx, "foo")
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	for {
		if len(c.Primaries(ctx)) == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no replica promoted")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n, err := c.NodeFor(ctx, "foo"); err != nil || n == p {
		t.Fatalf("foo served by %v (err %v) after failover", n, err)
	}
	p.Restart()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(c.Replicas(ctx)); got != 3 {
		t.Fatalf("replicas after rejoin = %d, want 3", got)
	}
}

// tbRecorder records Skip and Fatal instead of stopping the test.
type tbRecorder struct {
	testing.TB
	skipped, failed bool
}

func (r *tbRecorder) Helper()               {}
func (r *tbRecorder) Skip(...any)           { r.skipped = true }
func (r *tbRecorder) Fatal(...any)          { r.failed = true }
func (r *tbRecorder) Skipf(string, ...any)  { r.skipped = true }
func (r *tbRecorder) Fatalf(string, ...any) { r.failed = true }

// TestRequireFails: without redis-server, a test fails, in CI or not: a
// skipped run of a test that needs a real server looks green and proves
// nothing.
func TestRequireFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no redis-server on it
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		rec := &tbRecorder{TB: t}
		Require(rec)
		if rec.skipped || !rec.failed {
			t.Errorf("CI=%q: skipped %v failed %v, want a failure", ci, rec.skipped, rec.failed)
		}
	}
}
