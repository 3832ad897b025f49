package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
)

// The orphaned-lease reproduction, on a real 3 + 3 Cluster: process A takes
// a key's lease and starts a 400 ms load; meanwhile another primary freezes
// and A invalidates keys on it. Those invalidations used to open A's
// tier-wide breaker, which then skipped A's lease release (and its write),
// leaving the lease held by nobody: process B, on a healthy node with a
// healthy database, waited 5 s for it and then failed. Now the frozen
// primary is A's problem alone: A's breaker stays closed, its value is
// stored and its lease released, and B is answered from Redis at once.
func TestLeaseOfAProcessWhoseOtherPrimaryFroze(t *testing.T) {
	cl := redistest.Cluster(t)
	ctx := context.Background()
	p := holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}}
	open := func() (*Tier, *holdfast.Namespace) {
		tr := newTier(t, Options{Addrs: cl.Addrs()})
		_, ns := newProcess(t, holdfast.Options{Shared: tr, Logger: quiet}, p)
		return tr, ns
	}
	trA, a := open()
	_, b := open()

	const key = "orphan"
	home := primaryOf(trA, "product:"+key)
	var other string
	var victims []string
	for addr, ks := range keysByPrimary(trA, "product:", 20) {
		if addr != home {
			other, victims = addr, ks
			break
		}
	}
	var frozen *redistest.Server
	for _, n := range cl.Nodes() {
		if n.Addr() == other {
			frozen = n
		}
	}

	// Watch A's breaker for the whole run.
	var opened atomic.Bool
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			if trA.br.State() != breaker.Closed {
				opened.Store(true)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})

	loading := make(chan struct{})
	var aRes holdfast.Result
	var aErr error
	var aDone sync.WaitGroup
	aDone.Go(func() {
		aRes, aErr = a.Get(ctx, key, func(context.Context, string) ([]byte, error) {
			close(loading)
			time.Sleep(400 * time.Millisecond)
			return []byte("new"), nil
		})
	})
	<-loading
	frozen.Freeze()
	t.Cleanup(frozen.Thaw)
	var inv sync.WaitGroup
	for _, k := range victims {
		inv.Go(func() { _ = a.Invalidate(ctx, k) })
	}
	inv.Wait()
	aDone.Wait()
	if aErr != nil || string(aRes.Value) != "new" {
		t.Fatalf("A's own read: %q, %v", aRes.Value, aErr)
	}
	// A's write and release happen after its readers are answered.
	deadline := time.Now().Add(5 * time.Second)
	for testhook.Loading(a, key) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}

	start := time.Now()
	var bLoads atomic.Int64
	res, err := b.Get(ctx, key, func(context.Context, string) ([]byte, error) {
		bLoads.Add(1)
		return []byte("from B"), nil
	})
	took := time.Since(start)
	close(stop)
	watch.Wait()
	t.Logf("B answered %q from %v in %v; A's breaker opened: %v", res.Value, res.Source, took, opened.Load())
	if err != nil || string(res.Value) != "new" || res.Source != holdfast.SourceShared {
		t.Fatalf("B read %q from %v, %v; want A's value from Redis", res.Value, res.Source, err)
	}
	if took > 100*time.Millisecond {
		t.Fatalf("B waited %v for a key whose holder had finished", took)
	}
	if opened.Load() {
		t.Fatal("A's tier-wide breaker opened because one other primary froze")
	}
	if s := b.Stats(); s.Get("lease.waits") != 0 || bLoads.Load() != 0 {
		t.Fatalf("B waited on a lease (%d) or loaded (%d)", s.Get("lease.waits"), bLoads.Load())
	}
	// The lease is gone: anyone may take it now.
	if got, err := trA.Lease(ctx, "product:"+key, "next", time.Second); err != nil || !got {
		t.Fatalf("the lease is still held after A's load (%v, %v)", got, err)
	}
}

// TestLeaseSentToAFrozenServerNeverOutlivesIt: a lease's SET reaches a
// server frozen with SIGSTOP, the call gives up at its WriteTimeout, and
// the server runs the SET when it wakes, after the lease was meant to end.
// The lease must not appear then: with a TTL counted from when the server
// ran it, it held the key for a whole Lease.TTL on behalf of nobody, and
// every process's readers of the key waited for it (a chaos run: 0.78 s
// after a primary's freeze).
func TestLeaseSentToAFrozenServerNeverOutlivesIt(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, KeyPrefix: "fz:", WriteTimeout: 100 * time.Millisecond})
	rc := rawClient(t, srv.Addr())
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	srv.Freeze()
	if ok, err := tr.Lease(ctx, "k", "token", ttl); err == nil {
		srv.Thaw()
		t.Fatalf("Lease on a frozen server: %v, nil error", ok)
	}
	time.Sleep(ttl + 200*time.Millisecond) // the lease was meant to be over by now
	srv.Thaw()
	// The server runs the buffered SET as it wakes; watch the lease key
	// for longer than the lease would have lived from then.
	deadline := time.Now().Add(ttl + 300*time.Millisecond)
	polls := 0
	for time.Now().Before(deadline) {
		if v, ok := rawGet(t, rc, "{fz:k}:lease"); ok {
			pttl, _ := rc.Do(ctx, rc.B().Pttl().Key("{fz:k}:lease").Build()).AsInt64()
			t.Fatalf("a lease %q with %d ms left appeared after the server woke, %v after it was meant to end", v, pttl, ttl+200*time.Millisecond)
		}
		polls++
		time.Sleep(5 * time.Millisecond)
	}
	if polls < 10 {
		t.Fatalf("only %d polls of the lease key: the check proves nothing", polls)
	}
}
