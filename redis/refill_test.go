package redis_test

// Refill from memory on a real redis-server restarted empty: the keys the
// processes hold current come back from their memory, not the source, once
// each; and no write-back undoes an invalidation, whether it was made
// while the server was down (and replayed) or right after it restarted.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// refillTestPolicy keeps values past the test's few seconds and no hot
// tier, so that every read reaches Redis. The slow-read delay is off: the
// readers wait for the write-back's verdict, which is what the tests check
// (the root package tests a slow write-back).
var refillTestPolicy = holdfast.Policy{TTL: time.Minute, SoftTTL: 30 * time.Second, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}, SlowReadGrace: -1}

// versioned is a source whose keys change on update; a read returns
// "key@version".
type versioned struct {
	mu    sync.Mutex
	vers  map[string]int
	loads atomic.Int64
}

func (s *versioned) Load(ctx context.Context, key string) ([]byte, error) {
	s.loads.Add(1)
	return []byte(s.current(key)), nil
}

func (s *versioned) current(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%s@%d", key, s.vers[key])
}

func (s *versioned) update(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vers == nil {
		s.vers = make(map[string]int)
	}
	s.vers[key]++
}

// refillProcess is one process: its own Tier (connections, stream) and
// Cache over the shared server.
type refillProcess struct {
	tier  *redis.Tier
	cache *holdfast.Cache
	ns    *holdfast.Namespace
}

// newRefillProcess builds a process over srv; wrap, when set, wraps its
// tier (a hook).
func newRefillProcess(t *testing.T, srv *redistest.Server, wrap func(*redis.Tier) tier.Tier) refillProcess {
	t.Helper()
	return newRefillProcessWith(t, srv, wrap, refillTestPolicy)
}

// newRefillProcessWith is newRefillProcess with the namespace's policy.
func newRefillProcessWith(t *testing.T, srv *redistest.Server, wrap func(*redis.Tier) tier.Tier, policy holdfast.Policy) refillProcess {
	t.Helper()
	tr, err := redis.New(redis.Options{
		Addrs:   []string{srv.Addr()},
		Breaker: quickBreaker,
		// A heartbeat every 100 ms: a copy loaded a few hundred ms before
		// the kill is vouched for by one.
		Stream: redis.StreamOptions{Heartbeat: 100 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	var shared tier.Tier = tr
	if wrap != nil {
		shared = wrap(tr)
	}
	c, err := holdfast.New(holdfast.Options{Shared: shared, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	eventually(t, 10*time.Second, func() bool { return testhook.StreamHeard(c) })
	ns, err := c.Namespace("product", policy)
	if err != nil {
		t.Fatal(err)
	}
	return refillProcess{tr, c, ns}
}

func refillKey(i int) string { return fmt.Sprint("k", i) }

// fill has ps[0] load every key and the others read it from Redis, then
// waits until every process has heard a heartbeat well after, which
// vouches for every copy.
func fill(t *testing.T, ps []refillProcess, src *versioned, keys int) {
	t.Helper()
	ctx := context.Background()
	for i := range keys {
		k := refillKey(i)
		for _, p := range ps {
			if _, err := p.ns.Get(ctx, k, src.Load); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, func() bool { return !testhook.Loading(p.ns, k) })
		}
	}
	after := time.Now().Add(400 * time.Millisecond)
	for _, p := range ps {
		eventually(t, 10*time.Second, func() bool { return testhook.StreamHeardAt(p.cache).After(after) })
	}
}

// readAll reads every key from every process until done says so or 15 s
// pass (a bound, not a wait: it ends as soon as done holds), and calls
// check with every answer.
func readAll(t *testing.T, ps []refillProcess, src *versioned, keys int, done func() bool, check func(p int, key string, res holdfast.Result, began time.Time)) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for round := 0; round < 5000 && time.Now().Before(deadline); round++ {
		var wg sync.WaitGroup
		for pi, p := range ps {
			wg.Go(func() {
				for i := range keys {
					k := refillKey(i)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					began := time.Now()
					res, err := p.ns.Get(ctx, k, src.Load)
					cancel()
					if err != nil {
						t.Errorf("process %d Get %s: %v", pi, k, err)
						return
					}
					check(pi, k, res, began)
				}
			})
		}
		wg.Wait()
		if t.Failed() || done() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the reads did not reach the state the test waits for within 15 s")
}

// inRedis reports whether the server holds key's current value, and
// whether it holds anything.
func inRedis(t *testing.T, tr *redis.Tier, src *versioned, key string) (current, held bool) {
	t.Helper()
	v, found, err := tr.Get(context.Background(), "product:"+key)
	if err != nil || !found {
		return false, false
	}
	e, err := tier.DecodeEntry(v)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return string(e.Value) == src.current(key), true
}

func stat(ps []refillProcess, name string) uint64 {
	var n uint64
	for _, p := range ps {
		n += p.ns.Stats().Get(name)
	}
	return n
}

// landedRefills counts, per key, the write-backs the tier answered
// written, across every process that wraps its tier with it.
type landedRefills struct {
	mu     sync.Mutex
	landed map[string]int
}

type countedRefill struct {
	*redis.Tier
	l *landedRefills
}

func (c countedRefill) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	written, held, err := c.Tier.Refill(ctx, it)
	if written {
		c.l.mu.Lock()
		c.l.landed[it.Key]++
		c.l.mu.Unlock()
	}
	return written, held, err
}

// Four processes hold 60 keys; Redis is killed and restarted empty. The
// keys come back from memory, each written back once across the
// processes, with no load.
func TestRefillAfterRestartEmpty(t *testing.T) {
	srv := redistest.Standalone(t)
	l := &landedRefills{landed: map[string]int{}}
	ps := make([]refillProcess, 4)
	for i := range ps {
		ps[i] = newRefillProcess(t, srv, func(tr *redis.Tier) tier.Tier { return countedRefill{tr, l} })
	}
	src := &versioned{}
	const keys = 60
	fill(t, ps, src, keys)
	loadsBefore := src.loads.Load()

	srv.Restart()
	var stale atomic.Int64
	readAll(t, ps, src, keys, func() bool {
		for i := range keys {
			if cur, _ := inRedis(t, ps[0].tier, src, refillKey(i)); !cur {
				return false
			}
		}
		return true
	}, func(_ int, k string, res holdfast.Result, _ time.Time) {
		if string(res.Value) != src.current(k) {
			stale.Add(1)
		}
	})
	loads := src.loads.Load() - loadsBefore
	refills := stat(ps, "refills")
	t.Logf("after the restart: %d loads, %d write-backs for %d keys in %d processes", loads, refills, keys, len(ps))
	if loads != 0 {
		t.Errorf("%d loads after the restart of keys every process held current, want 0", loads)
	}
	// A write-back whose reply a busy machine lost past WriteTimeout
	// landed uncounted; none lands twice.
	for k, n := range l.landed {
		if n > 1 {
			t.Errorf("%s written back %d times", k, n)
		}
	}
	if refills > keys || refills < keys*3/4 {
		t.Errorf("%d write-backs for %d keys, want one per key across the processes", refills, keys)
	}
	if t.Failed() {
		for i, p := range ps {
			t.Logf("process %d: %v; tier %+v", i, p.ns.Stats(), p.tier.Stats())
		}
	}
	if n := stale.Load(); n != 0 {
		t.Errorf("%d stale reads", n)
	}
}

// An invalidation made while Redis was down (queued, replayed when it is
// back) and one made right after it restarted empty are never undone by a
// write-back: once each has landed, no process reads the old value, and
// Redis holds nothing old. The keys nobody invalidated are written back.
func TestRefillNeverUndoesAnInvalidation(t *testing.T) {
	srv := redistest.Standalone(t)
	ps := []refillProcess{newRefillProcess(t, srv, nil), newRefillProcess(t, srv, nil), newRefillProcess(t, srv, nil)}
	src := &versioned{}
	const keys = 30
	fill(t, ps, src, keys)
	ctx := context.Background()
	duringOutage := []string{refillKey(0), refillKey(1), refillKey(2), refillKey(3), refillKey(4)}
	afterRestart := []string{refillKey(5), refillKey(6), refillKey(7), refillKey(8), refillKey(9)}

	srv.Kill()
	for _, k := range duringOutage {
		src.update(k)
	}
	if err := ps[1].ns.Invalidate(ctx, duringOutage...); err != nil {
		t.Fatal(err)
	}
	if n := ps[1].ns.Stats().Get("pending_deletes"); n != uint64(len(duringOutage)) {
		t.Fatalf("%d invalidations queued during the outage, want %d", n, len(duringOutage))
	}
	srv.Restart()
	for _, k := range afterRestart {
		src.update(k)
	}
	if err := ps[2].ns.Invalidate(ctx, afterRestart...); err != nil {
		t.Fatal(err)
	}

	// Settled: both invalidations have landed, every process hears the
	// stream and reaches Redis. Reads begun after that must all be current.
	var settledAt atomic.Int64
	settled := func() bool {
		for _, p := range ps {
			if p.ns.Stats().Get("pending_deletes") != 0 || !testhook.StreamHeard(p.cache) || p.tier.Stats().BreakerState != redis.BreakerClosed {
				return false
			}
		}
		return true
	}
	var mu sync.Mutex
	staleAfter, readsAfter, staleBefore := 0, 0, 0
	rounds := 0
	readAll(t, ps, src, keys, func() bool {
		if settledAt.Load() == 0 && settled() {
			settledAt.Store(time.Now().UnixNano())
		}
		if settledAt.Load() != 0 {
			rounds++
		}
		return rounds >= 20
	}, func(p int, k string, res holdfast.Result, began time.Time) {
		mu.Lock()
		defer mu.Unlock()
		fresh := string(res.Value) == src.current(k)
		// A read that joined a flight begun before then may get that
		// flight's answer: the margin leaves those out.
		if at := settledAt.Load(); at != 0 && began.UnixNano() > at+int64(200*time.Millisecond) {
			readsAfter++
			if !fresh {
				staleAfter++
				t.Errorf("process %d read %s = %q from %v (%v) after the invalidations landed; current %q", p, k, res.Value, res.Source, res.Reason, src.current(k))
			}
		} else if !fresh {
			staleBefore++
		}
	})
	for i := range keys {
		k := refillKey(i)
		if cur, held := inRedis(t, ps[0].tier, src, k); held && !cur {
			t.Errorf("Redis holds an old value of %s", k)
		}
	}
	refills := stat(ps, "refills")
	t.Logf("%d reads after the invalidations landed, %d stale; %d stale before they landed (last-known-good in the outage, and write-backs the replay then removed); %d write-backs", readsAfter, staleAfter, staleBefore, refills)
	if readsAfter == 0 {
		t.Fatal("no read after the invalidations landed")
	}
	if refills < keys-uint64(len(duringOutage)+len(afterRestart)) {
		t.Errorf("%d write-backs; want at least the %d keys nobody invalidated", refills, keys-len(duringOutage)-len(afterRestart))
	}
}

// hookedRefill runs before ahead of the first write-back it sends.
type hookedRefill struct {
	*redis.Tier
	once   sync.Once
	ran    atomic.Bool
	before func()
}

func (h *hookedRefill) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	h.once.Do(func() { h.before(); h.ran.Store(true) })
	return h.Tier.Refill(ctx, it)
}

// Another process invalidates the key between this one's check of its copy
// and its write-back reaching Redis: Redis refuses the write-back and the
// read loads the new value.
func TestRefillRaceWithAnotherProcessInvalidation(t *testing.T) {
	srv := redistest.Standalone(t)
	b := newRefillProcess(t, srv, nil)
	src := &versioned{}
	var hook *hookedRefill
	a := newRefillProcess(t, srv, func(tr *redis.Tier) tier.Tier {
		hook = &hookedRefill{Tier: tr, before: invalidateIn(t, b, src, "k0")}
		return hook
	})
	fill(t, []refillProcess{a}, src, 1)
	srv.Restart()
	for _, p := range []refillProcess{a, b} {
		eventually(t, 10*time.Second, func() bool {
			_, _, err := p.tier.Get(context.Background(), "product:probe")
			return err == nil && p.tier.Stats().BreakerState == redis.BreakerClosed && testhook.StreamHeard(p.cache)
		})
	}
	loads := src.loads.Load()
	var res holdfast.Result
	eventually(t, 10*time.Second, func() bool {
		var err error
		res, err = a.ns.Get(context.Background(), "k0", src.Load)
		if err != nil {
			t.Fatal(err)
		}
		return res.Reason != holdfast.ReasonTierDown
	})
	refusedAndLoaded(t, a, b, src, "k0", res, hook.ran.Load(), loads)
}

// invalidateIn returns a hook that updates key in src and invalidates it
// through p, which must reach Redis.
func invalidateIn(t *testing.T, p refillProcess, src *versioned, key string) func() {
	return func() {
		src.update(key)
		if err := p.ns.Invalidate(context.Background(), key); err != nil {
			t.Error(err)
		}
		if n := p.ns.Stats().Get("pending_deletes"); n != 0 {
			t.Errorf("the invalidation did not reach Redis (%d pending): not the race this test is about", n)
		}
	}
}

// refusedAndLoaded fails the test unless a's hooked write-back of key ran
// and was refused, its read answered res with key's current value loaded
// (one load since loads), and Redis, as b reads it, holds nothing older.
func refusedAndLoaded(t *testing.T, a, b refillProcess, src *versioned, key string, res holdfast.Result, ran bool, loads int64) {
	t.Helper()
	if !ran {
		t.Fatalf("no write-back was tried: %v (%v)", res.Source, res.Reason)
	}
	if string(res.Value) != src.current(key) || res.Source != holdfast.SourceLoaded {
		t.Fatalf("%q from %v; want %q loaded", res.Value, res.Source, src.current(key))
	}
	if st := a.ns.Stats(); st.Get("refills") != 0 || src.loads.Load() != loads+1 {
		t.Fatalf("refills %d, loads %d; want the write-back refused and one load", st.Get("refills"), src.loads.Load()-loads)
	}
	eventually(t, 10*time.Second, func() bool { return !testhook.Loading(a.ns, key) })
	if cur, held := inRedis(t, b.tier, src, key); held && !cur {
		t.Fatal("Redis holds the value from before the invalidation")
	}
}
