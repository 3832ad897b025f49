package redis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/tier"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newCache is one "process": its own Tier (its own connections) and Cache.
func newCache(t *testing.T, addrs []string, p holdfast.Policy) *holdfast.Namespace {
	t.Helper()
	return newCacheWrapped(t, addrs, p, nil)
}

// newCacheWrapped is newCache with the Tier wrapped by wrap (nil: not).
func newCacheWrapped(t *testing.T, addrs []string, p holdfast.Policy, wrap func(tier.Tier) tier.Tier) *holdfast.Namespace {
	t.Helper()
	return newCacheOn(t, Options{Addrs: addrs}, p, wrap)
}

// newCacheOn is newCacheWrapped over a Tier with options o.
func newCacheOn(t *testing.T, o Options, p holdfast.Policy, wrap func(tier.Tier) tier.Tier) *holdfast.Namespace {
	t.Helper()
	var tr tier.Tier = newTier(t, o)
	if wrap != nil {
		tr = wrap(tr)
	}
	_, ns := newProcess(t, holdfast.Options{Shared: tr, MaxConcurrentLoads: 64, Logger: quiet}, p)
	return ns
}

// newProcess is a Cache with opts, closed by the test's cleanup, and its
// namespace "product" with policy p.
func newProcess(t *testing.T, opts holdfast.Options, p holdfast.Policy) (*holdfast.Cache, *holdfast.Namespace) {
	t.Helper()
	c, err := holdfast.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace("product", p)
	if err != nil {
		t.Fatal(err)
	}
	return c, ns
}

func TestCoordinatorPrimitives(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			addrs := serverAddrs(t, mode)
			tr := newTier(t, Options{Addrs: addrs})
			ctx := ctxT(t, 10*time.Second)
			for i := range 20 { // keys over many slots: the siblings must share each one's slot
				key := fmt.Sprint("product:", i)
				v, err := tr.Version(ctx, key)
				if err != nil || v != 0 {
					t.Fatalf("%s: version of a new key = %d, %v", key, v, err)
				}
				if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("a"), TTL: time.Minute}, 0); !ok || err != nil {
					t.Fatalf("%s: SetIfVersion at the current version: %v %v", key, ok, err)
				}
				if err := tr.Invalidate(ctx, key); err != nil {
					t.Fatalf("%s: Invalidate: %v", key, err)
				}
				if _, found, _ := tr.Get(ctx, key); found {
					t.Fatalf("%s: value survived Invalidate", key)
				}
				if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("old"), TTL: time.Minute}, 0); ok || err != nil {
					t.Fatalf("%s: a write at the pre-invalidation version was accepted (%v, %v)", key, ok, err)
				}
				if v, _ := tr.Version(ctx, key); v != 1 {
					t.Fatalf("%s: version after one invalidation = %d", key, v)
				}
				if ok, _ := tr.Lease(ctx, key, "a", time.Minute); !ok {
					t.Fatalf("%s: a free lease was refused", key)
				}
				if ok, _ := tr.Lease(ctx, key, "b", time.Minute); ok {
					t.Fatalf("%s: a held lease was granted again", key)
				}
				if err := tr.Release(ctx, key, "b"); err != nil {
					t.Fatal(err)
				}
				if ok, _ := tr.Lease(ctx, key, "c", time.Minute); ok {
					t.Fatalf("%s: another token released the lease", key)
				}
				tr.Release(ctx, key, "a")
				if ok, _ := tr.Lease(ctx, key, "c", time.Minute); !ok {
					t.Fatalf("%s: the holder's release did not free the lease", key)
				}
			}
		})
	}
}

// 4 processes × 250 goroutines on one cold key, 200 ms loader: one load with
// leases (4 without); a hit on another key meanwhile is as fast as before.
func TestLeasesAcrossProcesses(t *testing.T) {
	srv := redistest.Standalone(t)
	for _, leases := range []bool{true, false} {
		t.Run(fmt.Sprint("leases=", leases), func(t *testing.T) {
			const processes, goroutines = 4, 250
			key := fmt.Sprint("cold-", leases)
			var loads atomic.Int64
			loader := func(ctx context.Context, key string) ([]byte, error) {
				loads.Add(1)
				time.Sleep(200 * time.Millisecond)
				return []byte("v"), nil
			}
			nss := make([]*holdfast.Namespace, processes)
			for i := range nss {
				// Budgets far above a loaded machine's stalls: a Lease
				// call that times out is skipped by design (the load goes
				// on without one), which would make this a test of the
				// machine's load rather than of coalescing.
				o := Options{Addrs: []string{srv.Addr()}, ReadBudget: time.Second, WriteTimeout: 2 * time.Second}
				// No answers from memory: the hits' own latency is
				// what is measured.
				nss[i] = newCacheOn(t, o, holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: leases}, SlowReadGrace: -1, Hot: holdfast.HotPolicy{MaxBytes: -1}}, nil)
			}
			warm := func(context.Context, string) ([]byte, error) { return []byte("w"), nil }
			if _, err := nss[0].Get(context.Background(), "warm", warm); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the warm key's write
			baseline := hitLatencies(t, nss[1], "warm", warm, 200, nil)

			var wg sync.WaitGroup
			var failed atomic.Int64
			gate := make(chan struct{})
			for _, ns := range nss {
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-gate
						if res, err := ns.Get(context.Background(), key, loader); err != nil || string(res.Value) != "v" {
							failed.Add(1)
						}
					}()
				}
			}
			close(gate)
			during := hitLatencies(t, nss[1], "warm", warm, 200, &loads)
			wg.Wait()
			if failed.Load() != 0 {
				t.Fatalf("%d reads failed", failed.Load())
			}
			want := int64(1)
			if !leases {
				want = processes
			}
			if got := loads.Load(); got != want {
				t.Fatalf("loader calls = %d, want %d", got, want)
			}
			b99, d99 := pct(baseline, 0.99), pct(during, 0.99)
			t.Logf("leases=%v: loads %d; hits on another key p99 %v before, %v during the load", leases, loads.Load(), b99, d99)
			if leases && d99 > b99+2*time.Millisecond+margin/4 {
				t.Fatalf("hits on another key slowed during the load: p99 %v against %v before", d99, b99)
			}
		})
	}
}

// hitLatencies reads key n times, one every millisecond, and returns the
// latencies; with during set, it starts once a load is under way.
func hitLatencies(t *testing.T, ns *holdfast.Namespace, key string, l holdfast.Loader, n int, during *atomic.Int64) []time.Duration {
	t.Helper()
	if during != nil {
		deadline := time.Now().Add(5 * time.Second)
		for during.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		res, err := ns.Get(context.Background(), key, l)
		if err != nil || res.Source != holdfast.SourceShared {
			t.Fatalf("hit on %s: %v %v", key, res.Source, err)
		}
		out = append(out, time.Since(start))
		time.Sleep(500 * time.Microsecond)
	}
	return out
}

func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// leaseHolderEnv makes the test binary, run as a child, act as a process
// that takes a key's lease and hangs in its load until it is killed.
const leaseHolderEnv = "HOLDFAST_TEST_LEASE_HOLDER"

func TestMain(m *testing.M) {
	if addr := os.Getenv(leaseHolderEnv); addr != "" {
		holdLeaseForever(addr)
		return
	}
	os.Exit(m.Run())
}

func holdLeaseForever(addr string) {
	tr, err := New(Options{Addrs: []string{addr}})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	c, _ := holdfast.New(holdfast.Options{Shared: tr, Logger: quiet})
	ns, _ := c.Namespace("product", holdfast.Policy{LoadTimeout: time.Hour, Lease: holdfast.LeasePolicy{Enabled: true, TTL: 2 * time.Second}})
	ns.Get(context.Background(), "held", func(context.Context, string) ([]byte, error) {
		fmt.Println("loading") // the parent kills us now
		select {}
	})
}

func TestLeaseHolderKilled(t *testing.T) {
	srv := redistest.Standalone(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), leaseHolderEnv+"="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "loading\n" {
		t.Fatalf("lease holder said %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	const leaseTTL, load = 2 * time.Second, 100 * time.Millisecond
	var loads atomic.Int64
	loader := func(context.Context, string) ([]byte, error) {
		loads.Add(1)
		time.Sleep(load)
		return []byte("v"), nil
	}
	var wg sync.WaitGroup
	var worst atomic.Int64
	for range 3 {
		ns := newCache(t, []string{srv.Addr()}, holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true, TTL: leaseTTL}})
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := ns.Get(context.Background(), "held", loader)
				if err != nil || string(res.Value) != "v" {
					t.Errorf("read after the holder died: %q %v", res.Value, err)
				}
				if d := int64(time.Since(killed)); d > worst.Load() {
					worst.Store(d)
				}
			}()
		}
	}
	wg.Wait()
	bound := leaseTTL + load + margin
	t.Logf("holder killed: every read answered within %v (bound: lease TTL %v + one load %v); %d load(s)", time.Duration(worst.Load()), leaseTTL, load, loads.Load())
	if time.Duration(worst.Load()) > bound {
		t.Fatalf("reads stalled %v after the holder died, beyond lease TTL + one load (%v)", time.Duration(worst.Load()), bound)
	}
	if loads.Load() != 1 {
		t.Fatalf("loads = %d after the dead holder's lease expired, want 1", loads.Load())
	}
}

// A slow load racing an invalidation: after Invalidate returns, the value
// the load read before it is never readable from Redis.
func TestStaleSetRace(t *testing.T) { staleSetRace(t, nil) }

// staleSetRace runs the randomized races with the loading process's tier
// wrapped by wrap (nil: not wrapped).
func staleSetRace(t *testing.T, wrap func(tier.Tier) tier.Tier) {
	srv := redistest.Standalone(t)
	rounds := 1000
	if testing.Short() {
		rounds = 200
	}
	loaderNS := newCacheWrapped(t, []string{srv.Addr()}, holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}}, wrap)
	writerNS := newCache(t, []string{srv.Addr()}, holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}})
	raw := rawClient(t, srv.Addr())
	ctx := context.Background()
	var db atomic.Int64 // the source of truth: the current version of the row
	violations := 0
	for i := range rounds {
		key := strconv.Itoa(i % 50)
		delay := time.Duration(rand.IntN(2000)) * time.Microsecond
		loader := func(context.Context, string) ([]byte, error) {
			v := db.Load() // read the row ...
			time.Sleep(delay)
			return []byte(strconv.FormatInt(v, 10)), nil // ... and return it late
		}
		loadDone := make(chan struct{})
		go func() {
			defer close(loadDone)
			loaderNS.Get(ctx, key, loader)
		}()
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		current := db.Add(1) // the update commits ...
		if err := writerNS.Invalidate(ctx, key); err != nil {
			t.Fatal(err) // ... then the cache is invalidated
		}
		// From here on Redis must never hold a value older than current.
		check := func() {
			s, err := raw.Do(ctx, raw.B().Get().Key("product:"+key).Build()).AsBytes()
			if err != nil {
				return // miss
			}
			e, err := tier.DecodeEntry(s)
			if err != nil {
				t.Fatalf("round %d: undecodable value: %v", i, err)
			}
			if v, _ := strconv.ParseInt(string(e.Value), 10, 64); v < current {
				violations++
			}
		}
		check()
		<-loadDone
		for testhook.Loading(loaderNS, key) {
			time.Sleep(100 * time.Microsecond)
		}
		check()
	}
	t.Logf("%d randomized races, %d violations", rounds, violations)
	if violations != 0 {
		t.Fatalf("%d of %d races left a pre-invalidation value readable", violations, rounds)
	}
}

// Invalidate while Redis is frozen, thaw it: this process never serves the
// old value from Redis, and the queued delete lands.
func TestInvalidateWhileFrozen(t *testing.T) {
	srv := redistest.Standalone(t)
	ns := newCache(t, []string{srv.Addr()}, holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}})
	raw := rawClient(t, srv.Addr())
	ctx := context.Background()
	var version atomic.Int64
	loader := func(context.Context, string) ([]byte, error) {
		return []byte(strconv.FormatInt(version.Load(), 10)), nil
	}
	if res, err := ns.Get(ctx, "p1", loader); err != nil || string(res.Value) != "0" {
		t.Fatalf("first read: %q %v", res.Value, err)
	}
	time.Sleep(50 * time.Millisecond) // the write lands
	srv.Freeze()
	version.Add(1)
	if err := ns.Invalidate(ctx, "p1"); err != nil {
		t.Fatalf("invalidate while frozen: %v (want it queued)", err)
	}
	srv.Thaw()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := ns.Get(ctx, "p1", loader)
		if err == nil && string(res.Value) == "0" {
			t.Fatalf("the old value was served after the invalidation (source %v)", res.Source)
		}
		st := ns.Stats()
		if st.Get("pending_deletes") == 0 && st.Get("replayed_deletes") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued invalidation never landed: %+v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if s, err := raw.Do(ctx, raw.B().Get().Key("product:p1").Build()).AsBytes(); err == nil {
		if e, _ := tier.DecodeEntry(s); string(e.Value) == "0" {
			t.Fatal("Redis still holds the old value after the replay")
		}
	}
}

// DB down, Redis up: values within the stale-if-error window come from
// Redis, with no error, in a process that never saw them.
func TestStaleFromRedisWhenTheDatabaseIsDown(t *testing.T) {
	srv := redistest.Standalone(t)
	p := holdfast.Policy{TTL: 200 * time.Millisecond, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}}
	writer := newCache(t, []string{srv.Addr()}, p)
	reader := newCache(t, []string{srv.Addr()}, p)
	ok := func(ctx context.Context, key string) ([]byte, error) { return []byte("v:" + key), nil }
	for i := range 20 {
		if _, err := writer.Get(context.Background(), strconv.Itoa(i), ok); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // past hard
	down := func(context.Context, string) ([]byte, error) { return nil, errors.New("db down") }
	for i := range 20 {
		res, err := reader.Get(context.Background(), strconv.Itoa(i), down)
		if err != nil || res.Source != holdfast.SourceShared || res.Reason != holdfast.ReasonSourceFailed || !res.Stale() || string(res.Value) != "v:"+strconv.Itoa(i) {
			t.Fatalf("key %d: %q from %v, err %v; want the stale value", i, res.Value, res.Source, err)
		}
	}
}
