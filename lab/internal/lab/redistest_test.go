package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// Real processes: redis-server must be installed (scripts/install-test-deps.sh);
// the test fails rather than skips without it.
func TestServerFreezeKillRestart(t *testing.T) {
	s, err := redistest.Launch(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || strings.HasSuffix(s.Addr(), ":6379") {
		t.Fatalf("address %s", s.Addr())
	}
	if _, err := Command(s.Addr(), time.Second, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}

	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if _, err := Command(s.Addr(), 200*time.Millisecond, "PING"); err == nil {
		t.Fatal("a frozen server answered")
	}
	if took := time.Since(begin); took < 150*time.Millisecond {
		t.Fatalf("frozen server failed after %v; it should accept and stay silent", took)
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	if v, err := Command(s.Addr(), time.Second, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("after thaw: %q, %v", v, err)
	}

	s.Kill()
	if _, err := Command(s.Addr(), 200*time.Millisecond, "PING"); err == nil {
		t.Fatal("a killed server answered")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := Command(s.Addr(), time.Second, "EXISTS", "k"); err != nil || v != "0" {
		t.Fatalf("restarted server not empty: %q, %v", v, err)
	}
	if n, err := CommandsProcessed(s.Addr()); err != nil || n < 1 {
		t.Fatalf("commands processed %d, %v", n, err)
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six servers")
	}
	c, err := StartCluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roles := map[string]int{}
	for _, a := range c.Addrs() {
		r, err := Role(a)
		if err != nil {
			t.Fatal(err)
		}
		roles[r]++
	}
	if roles["primary"] != 3 || roles["replica"] != 3 {
		t.Fatalf("roles %v, want 3 primaries and 3 replicas", roles)
	}
}
