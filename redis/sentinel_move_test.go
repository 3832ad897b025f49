package redis

import (
	"context"
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
