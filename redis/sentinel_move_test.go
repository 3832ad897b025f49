package redis

import (
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// TestSentinelMoveDoesNotWaitOnOldPrimary: moving to a new primary closes
// the old one's client without the resolver waiting for it, though the old
// server is frozen (SIGSTOP, its connection open) and the close takes
// about a second there; the client's Close still waits for it.
func TestSentinelMoveDoesNotWaitOnOldPrimary(t *testing.T) {
	oldSrv, newSrv := redistest.Standalone(t), redistest.Standalone(t)
	ctx := ctxT(t, 30*time.Second)
	connect := func(addr string) *primaryConn {
		c, err := rueidis.NewClient(singleNodeOption(Options{}, addr))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		return &primaryConn{addr: addr, client: c}
	}
	oldPC, newPC := connect(oldSrv.Addr()), connect(newSrv.Addr())
	s := &sentinelClient{moved: func(string) {}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cur.Store(oldPC)

	oldSrv.Freeze()
	t.Cleanup(oldSrv.Thaw)
	start := time.Now()
	s.move(newPC, 1)
	took := time.Since(start)
	t.Logf("move took %v", took)
	if took > 300*time.Millisecond {
		t.Errorf("move took %v, waiting on the old primary's client", took)
	}
	if got := s.primary(); got != newSrv.Addr() {
		t.Errorf("primary after the move %s, want %s", got, newSrv.Addr())
	}

	s.Close()
	wantClosed(t, ctx, oldPC.client, newPC.client)
}

// TestSentinelMoveClosesADialRacingIt: a call that is dialling the old
// primary again (its connection was killed) while the move closes that
// client gets a connection after Close; the move closes it too once the
// call returns, so no connection or goroutine outlives the tier.
// (rueidis stores a connection dialled during its Close over the closed
// one, and never closes it.)
func TestSentinelMoveClosesADialRacingIt(t *testing.T) {
	oldSrv, newSrv := redistest.Standalone(t), redistest.Standalone(t)
	ctx := ctxT(t, 30*time.Second)
	before := runtime.NumGoroutine()

	dialling, release := make(chan struct{}), make(chan struct{})
	var dials atomic.Int32
	co := singleNodeOption(Options{}, oldSrv.Addr())
	co.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if dials.Add(1) == 2 { // the dial after the kill waits for the Close
			close(dialling)
			<-release
		}
		return d.DialContext(ctx, "tcp", dst)
	}
	oc, err := rueidis.NewClient(co)
	if err != nil {
		t.Fatal(err)
	}
	if err := oc.Do(ctx, oc.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	nc, err := rueidis.NewClient(singleNodeOption(Options{}, newSrv.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	oldPC, newPC := &primaryConn{addr: oldSrv.Addr(), client: oc}, &primaryConn{addr: newSrv.Addr(), client: nc}
	s := &sentinelClient{moved: func(string) {}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.cur.Store(oldPC)

	// The old primary drops its clients, as a failover's reconfiguration
	// does; the next call finds its connection broken and dials again.
	admin := rawClient(t, oldSrv.Addr())
	if err := admin.Do(ctx, admin.B().ClientKill().TypeNormal().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	callDone := make(chan struct{})
	go func() {
		defer close(callDone)
		for dials.Load() < 2 && ctx.Err() == nil {
			callCtx, cancel := context.WithTimeout(ctx, time.Second)
			s.Do(callCtx, s.cur.Load().client.B().Ping().Build())
			cancel()
		}
	}()
	select {
	case <-dialling:
	case <-ctx.Done():
		t.Fatal("no call dialled the old primary again")
	}
	s.move(newPC, 1)
	time.Sleep(50 * time.Millisecond) // the move's Close runs while the dial waits
	close(release)
	<-callDone
	s.Close()
	// The old primary holds no connection of the tier's.
	wantOnlyAdmin(t, ctx, admin, "after Close")
	admin.Close()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
}
