package redis

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// keysByPrimary returns, for each primary in tr's map, n keys (unqualified,
// "ns:<i>") whose full key prefix+key it serves.
func keysByPrimary(tr *Tier, prefix string, n int) map[string][]string {
	out := map[string][]string{}
	primaries := len(tr.nodes.topo.Load().shards)
	for i := 0; len(out) < primaries || !allHave(out, n); i++ {
		k := "ns:" + strconv.Itoa(i)
		p := primaryOf(tr, prefix+k)
		if len(out[p]) < n {
			out[p] = append(out[p], k)
		}
	}
	return out
}

func allHave(m map[string][]string, n int) bool {
	for _, ks := range m {
		if len(ks) < n {
			return false
		}
	}
	return true
}

// opCounts counts one kind of call against healthy or frozen primaries.
type opCounts struct {
	ok, failed, bypassed atomic.Int64
	lastErr              atomic.Value // error
}

func (c *opCounts) add(err error) {
	switch {
	case err == nil:
		c.ok.Add(1)
	case errors.Is(err, tier.ErrBypassed):
		c.bypassed.Add(1)
	default:
		c.failed.Add(1)
		c.lastErr.Store(fmt.Sprint(err))
	}
}

func (c *opCounts) String() string {
	return fmt.Sprintf("ok %d, failed %d, bypassed %d (last error %v)", c.ok.Load(), c.failed.Load(), c.bypassed.Load(), c.lastErr.Load())
}

// TestFrozenPrimaryKeepsBreakerClosed: with one primary of a 3 + 3 Cluster
// frozen, a steady mix of every call that goes to a slot's primary
// (Invalidate, SetIfVersion, Lease, Release, Version, Set) over keys on
// every primary never moves the tier's breaker off closed, because each
// failure is the frozen node's: it is ejected, and calls for its slots
// are then refused at once with tier.ErrBypassed. Calls for the
// healthy primaries' keys all succeed, and reads of their keys all hit.
func TestFrozenPrimaryKeepsBreakerClosed(t *testing.T) {
	redistest.Require(t)
	// A grey node, not a failover: the cluster's own failure detection
	// stays out of the way for the whole freeze.
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 30 * time.Second})
	ctx := ctxT(t, 120*time.Second)
	// Budgets far above a healthy call's latency, so that only the frozen
	// node fails on a loaded 2-core machine under -race.
	tr := newTier(t, Options{Addrs: cl.Addrs(), KeyPrefix: "pn:", ReadBudget: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})

	byPrimary := keysByPrimary(tr, "pn:", 8)
	frozenAddr := primaryOf(tr, "pn:"+byPrimary[primaryOf(tr, "pn:ns:0")][0])
	var healthyKeys, frozenKeys []string
	for p, ks := range byPrimary {
		if p == frozenAddr {
			frozenKeys = ks
		} else {
			healthyKeys = append(healthyKeys, ks...)
		}
	}
	// Keys read but never written during the freeze, on healthy primaries.
	var readKeys []string
	for p, ks := range keysByPrimary(tr, "pn:r:", 8) {
		if p != frozenAddr {
			readKeys = append(readKeys, ks...)
		}
	}
	var items []tier.Item
	for _, k := range readKeys {
		items = append(items, tier.Item{Key: "r:" + k, Value: []byte("v"), TTL: 10 * time.Minute})
	}
	if err := tr.Set(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, tr, 6, 15*time.Second)

	frozen := serverByAddr(cl, frozenAddr)
	freezeAt := time.Now()
	frozen.Freeze()
	defer frozen.Thaw()

	kinds := []string{"invalidate", "setifversion", "lease", "release", "version", "set"}
	healthy, onFrozen := map[string]*opCounts{}, map[string]*opCounts{}
	for _, k := range kinds {
		healthy[k], onFrozen[k] = &opCounts{}, &opCounts{}
	}
	// call runs one call of kind on key and reports its error.
	call := func(kind, key string) error {
		switch kind {
		case "invalidate":
			return tr.Invalidate(ctx, key)
		case "setifversion":
			_, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("x"), TTL: time.Minute}, 0)
			return err
		case "lease":
			_, err := tr.Lease(ctx, key, "tok", time.Second)
			return err
		case "release":
			return tr.Release(ctx, key, "tok")
		case "version":
			_, err := tr.Version(ctx, key)
			return err
		}
		return tr.Set(ctx, tier.Item{Key: key, Value: []byte("x"), TTL: time.Minute})
	}

	const phase = 5 * time.Second
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var notClosed, samples atomic.Int64
	wg.Add(1)
	go func() { // the breaker, sampled every 5 ms
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			samples.Add(1)
			if tr.Stats().BreakerState != BreakerClosed {
				notClosed.Add(1)
			}
		}
	}()
	for w, kind := range kinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := healthyKeys[i%len(healthyKeys)]
				healthy[kind].add(call(kind, k))
				k = frozenKeys[i%len(frozenKeys)]
				onFrozen[kind].add(call(kind, k))
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	var hits, readFailures atomic.Int64
	var lastReadErr atomic.Value
	wg.Add(1)
	go func() { // reads of the healthy primaries' keys
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, found, err := tr.Get(ctx, "r:"+readKeys[i%len(readKeys)])
			if err == nil && found {
				hits.Add(1)
			} else {
				readFailures.Add(1)
				lastReadErr.Store(fmt.Sprintf("%v after the freeze: found %v, %v", time.Since(freezeAt), found, err))
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(phase)
	close(stop)
	wg.Wait()

	fst := nodeStat(tr, frozenAddr)
	st := tr.Stats()
	for _, k := range kinds {
		t.Logf("%-12s healthy: %v; frozen: %v", k, healthy[k], onFrozen[k])
	}
	t.Logf("breaker not closed in %d of %d samples over %v; %d healthy reads hit, %d failed; frozen node %+v (ejected %v after the freeze); tier %+v",
		notClosed.Load(), samples.Load(), phase, hits.Load(), readFailures.Load(), fst, fst.LastEjected.Sub(freezeAt), st)
	if notClosed.Load() != 0 || st.BreakerOpens != 0 || st.BreakerTransitions != 0 {
		t.Fatalf("the tier's breaker left closed: %d of %d samples, %d opens", notClosed.Load(), samples.Load(), st.BreakerOpens)
	}
	if readFailures.Load() != 0 || hits.Load() < 100 {
		t.Fatalf("reads of the healthy primaries' keys: %d hits, %d not (last %v)", hits.Load(), readFailures.Load(), lastReadErr.Load())
	}
	if fst.Ejections == 0 || fst.State != NodeEjected {
		t.Fatalf("frozen primary not ejected: %+v", fst)
	}
	for _, k := range kinds {
		if h := healthy[k]; h.failed.Load() != 0 || h.bypassed.Load() != 0 || h.ok.Load() == 0 {
			t.Errorf("%s on the healthy primaries: %v", k, h)
		}
		// Once ejected, the frozen node's calls are refused without a
		// round trip: a handful of timeouts before, bypasses after.
		if f := onFrozen[k]; f.bypassed.Load() == 0 || f.ok.Load() != 0 {
			t.Errorf("%s on the frozen primary: %v", k, f)
		}
	}
}
