package redis

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// TestRetiredNodeClosedOffInstall: a node that left the slot map and has
// since stopped answering (a real server, SIGSTOPped, with the node's
// connections open) is closed when its retirement ends on a goroutine the
// Tier owns, so the map installed then is not held up by the close, and
// the Tier's Close waits for it.
func TestRetiredNodeClosedOffInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starting a Cluster takes seconds")
	}
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 60*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "t:"})
	s := tr.nodes

	msg, err := tr.client.Do(ctx, tr.client.B().ClusterSlots().Build()).ToMessage()
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseClusterSlots(msg, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}

	// A second node for one of the servers, its connections open, the
	// server then frozen: this node's close waits on them.
	srv := cl.Replicas(ctx)[0]
	old := s.newNode(srv.Addr())
	if old == nil {
		t.Fatal("no node for", srv.Addr())
	}
	for _, c := range []rueidis.Client{old.client, old.asPrimary} {
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)

	// Hold the loop's refreshes off, so that this install is the one that
	// ends the retirement.
	s.mu.Lock()
	for s.refreshing {
		s.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		s.mu.Lock()
	}
	s.refreshing = true
	s.retired["retired:1"] = retiredNode{n: old, at: time.Now().Add(-2 * retireFor)}
	s.mu.Unlock()

	start := time.Now()
	s.install(m)
	took := time.Since(start)
	t.Logf("install with the retirement ending took %v", took)

	s.mu.Lock()
	_, still := s.retired["retired:1"]
	s.refreshing = false
	s.mu.Unlock()
	if still {
		t.Fatal("the node's retirement did not end")
	}
	// The close itself, measured alone, takes about a second a client on
	// a frozen server; the install without it well under a millisecond.
	if took > 300*time.Millisecond {
		t.Errorf("the install took %v, waiting on the retired node's close", took)
	}

	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, ctx, old.client, old.asPrimary)
}

// wantClosed fails t unless every client in cs has been closed.
func wantClosed(t *testing.T, ctx context.Context, cs ...rueidis.Client) {
	t.Helper()
	for _, c := range cs {
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); !errors.Is(err, rueidis.ErrClosing) {
			t.Errorf("after Close, a client answers %v, want %v", err, rueidis.ErrClosing)
		}
	}
}

// TestNodeCloseLeavesNoConnection: a node's close closes a connection
// dialled before it that no client holds (as one a call was dialling when
// rueidis's Close ran, which rueidis stores over its closed one), and a
// dial that ends after it is refused, so no connection outlives the node.
func TestNodeCloseLeavesNoConnection(t *testing.T) {
	srv := redistest.Standalone(t)
	ctx := ctxT(t, 30*time.Second)
	o, _, err := Options{Addrs: []string{srv.Addr()}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeSet{t: &Tier{opts: o}, o: o.Cluster, kick: make(chan struct{}, 1), start: time.Now(), sentinel: true}
	n := s.newNode(srv.Addr())
	if n == nil {
		t.Fatal("no node for", srv.Addr())
	}
	if err := n.client.Do(ctx, n.client.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Timeout: time.Second}
	racing, err := dialNode(ctx, n, srv.Addr(), d, nil, "", "", false)
	if err != nil {
		t.Fatal(err)
	}

	n.close()
	racing.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := racing.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a connection dialled before the close reads %v after it, want %v", err, net.ErrClosed)
	}
	if c, err := dialNode(ctx, n, srv.Addr(), d, nil, "", "", false); !errors.Is(err, errNodeClosed) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a dial after the close returned %v, want %v", err, errNodeClosed)
	}
	wantClosed(t, ctx, n.client)

	wantOnlyAdmin(t, ctx, rawClient(t, srv.Addr()), "after the node's close")
}

// wantOnlyAdmin fails t unless, within 5 s, admin's server has no normal
// connection but admin's own.
func wantOnlyAdmin(t *testing.T, ctx context.Context, admin rueidis.Client, when string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		list, err := admin.Do(ctx, admin.B().ClientList().TypeNormal().Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if k := strings.Count(list, "\n"); k <= 1 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the server still has %d connections %s:\n%s", k, when, list)
		}
	}
}
