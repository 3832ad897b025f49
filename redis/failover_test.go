package redis

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// Read-your-invalidations across a failover, on a real 3+3 Cluster.

// spyTier is the shared tier of a Cache, counting the values Redis returns
// once armed: the Cache has its own defence against an old shared value
// (it remembers its invalidations), and what is tested here is that the
// tier never returns one in the first place.
type spyTier struct {
	*Tier
	old             string // the value that must not come back
	armed           atomic.Bool
	reads, oldReads atomic.Int64
}

func (s *spyTier) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, found, err := s.Tier.Get(ctx, key)
	if s.armed.Load() && err == nil {
		s.reads.Add(1)
		if found {
			if e, derr := tier.DecodeEntry(v); derr == nil && string(e.Value) == s.old {
				s.oldReads.Add(1)
			}
		}
	}
	return v, found, err
}

// writer is one process that writes a key through holdfast and then
// invalidates it.
type writer struct {
	name    string
	spy     *spyTier
	ns      *holdfast.Namespace
	key     string
	version atomic.Int64 // the source of truth
	loader  holdfast.Loader
	// what the Cache returned after the invalidation
	cacheOld, cacheNew, errs atomic.Int64
}

func newWriter(t *testing.T, name string, cl *redistest.RedisCluster, o Options, key string) *writer {
	t.Helper()
	o.Addrs = cl.Addrs()[:1]
	w := &writer{name: name, key: key, spy: &spyTier{Tier: newTier(t, o), old: "1"}}
	waitMapComplete(t, w.spy.Tier)
	c, err := holdfast.New(holdfast.Options{Shared: w.spy, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if w.ns, err = c.Namespace("product", holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	w.version.Store(1)
	w.loader = func(context.Context, string) ([]byte, error) {
		return []byte(strconv.FormatInt(w.version.Load(), 10)), nil
	}
	return w
}

// read reads the key once through the Cache, which counts what it returns,
// and once from the tier itself, which the spy counts: the Cache answers
// most reads from its own memory.
func (w *writer) read(ctx context.Context) {
	_, _, _ = w.spy.Get(ctx, "product:"+w.key)
	res, err := w.ns.Get(ctx, w.key, w.loader)
	switch {
	case err != nil:
		w.errs.Add(1)
	case string(res.Value) == "1":
		w.cacheOld.Add(1)
	default:
		w.cacheNew.Add(1)
	}
}

// storedValue is the value in the envelope stored under full in srv's copy,
// read the way the tier's node connections read (READONLY), or "" when srv
// has none.
func storedValue(t *testing.T, srv *redistest.Server, full string) string {
	t.Helper()
	raw := storedRaw(t, srv, full)
	if raw == "" {
		return ""
	}
	e, err := tier.DecodeEntry([]byte(raw))
	if err != nil {
		t.Fatalf("%s on %s: %v", full, srv.Addr(), err)
	}
	return string(e.Value)
}

// failOverBlocked fails old over to one of its replicas (CLUSTER FAILOVER,
// or TAKEOVER) with old's resync blocked, so that the demoted node keeps the
// data it had, as it does until a full resync begins. It returns the
// promoted replica.
func failOverBlocked(t *testing.T, ctx context.Context, cl *redistest.RedisCluster, old *redistest.Server, takeover bool) *redistest.Server {
	t.Helper()
	replica, err := cl.ReplicaOf(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.BlockSync(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.UnblockSync(context.Background()) })
	if demoted, err := cl.Failover(ctx, replica, takeover); err != nil || demoted != old {
		t.Fatalf("failover (takeover %v): %v (demoted %v, want %s)", takeover, err, demoted, old.Addr())
	}
	return replica
}

// TestClusterFailoverReadYourInvalidations: a process writes v1 through
// holdfast, a replica takes over its primary (CLUSTER FAILOVER, and CLUSTER
// FAILOVER TAKEOVER), the demoted primary keeps v1 (its resync is held
// back, as it is for seconds when a partial resync is refused), and the
// process invalidates the key, moves its source to v2 and reads for 3 s.
// After Invalidate returned, its tier never returns v1: neither with the
// default intervals nor with a slot map and readiness that do not follow
// the failover on their own.
func TestClusterFailoverReadYourInvalidations(t *testing.T) {
	skipShort(t)
	redistest.Require(t)
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "failover", true: "takeover"}[takeover], func(t *testing.T) {
			cl := redistest.Cluster(t)
			ctx := ctxT(t, 2*time.Minute)
			probe := newTier(t, Options{Addrs: cl.Addrs()[:1]})
			p := probe.nodes.primaryFor(0).addr
			tags := tagsOn(probe, p, 2)
			writers := []*writer{
				newWriter(t, "default intervals", cl, Options{}, "{"+tags[0]+"}"),
				newWriter(t, "stale map and readiness", cl, Options{Cluster: ClusterOptions{
					TopologyInterval: time.Hour, ReadinessInterval: time.Hour}}, "{"+tags[1]+"}"),
			}
			for _, w := range writers {
				if res, err := w.ns.Get(ctx, w.key, w.loader); err != nil || string(res.Value) != "1" {
					t.Fatalf("%s: first read %q %v", w.name, res.Value, err)
				}
			}
			old := serverByAddr(cl, p)
			for _, w := range writers { // the loads' writes are asynchronous
				deadline := time.Now().Add(10 * time.Second)
				for storedValue(t, old, "product:"+w.key) != "1" {
					if time.Now().After(deadline) {
						t.Fatalf("%s: v1 never reached Redis", w.name)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			failOverBlocked(t, ctx, cl, old, takeover)
			for _, w := range writers {
				w.version.Store(2)
				if err := w.ns.Invalidate(ctx, w.key); err != nil {
					t.Fatalf("%s: Invalidate: %v", w.name, err)
				}
				w.spy.armed.Store(true)
			}
			var wg sync.WaitGroup
			for _, w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
						w.read(ctx)
						time.Sleep(time.Millisecond)
					}
				}()
			}
			wg.Wait()
			for _, w := range writers {
				held := storedValue(t, old, "product:"+w.key)
				t.Logf("%s: the tier returned v1 %d times in %d reads; the Cache answered v1 %d times, v2 %d, errors %d; the demoted node holds %q",
					w.name, w.spy.oldReads.Load(), w.spy.reads.Load(), w.cacheOld.Load(), w.cacheNew.Load(), w.errs.Load(), held)
				if held != "1" {
					t.Fatalf("%s: the demoted primary no longer holds v1 (%q): the test did not reproduce the danger", w.name, held)
				}
				if w.spy.oldReads.Load() != 0 || w.cacheOld.Load() != 0 {
					t.Errorf("%s: v1 read back after Invalidate returned: %d times from the tier, %d from the Cache", w.name, w.spy.oldReads.Load(), w.cacheOld.Load())
				}
				if w.cacheNew.Load() == 0 {
					t.Errorf("%s: v2 never read", w.name)
				}
			}
		})
	}
}
