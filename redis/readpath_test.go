package redis_test

// The read path with a real redis-server: holdfast.Cache and redis.Tier
// together, with Redis killed, frozen and failing while a load is in flight,
// corrupt bytes planted in Redis and oversized values. The tier alone is
// tested in tier_test.go; here the question is what a caller of
// Namespace.Get sees.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// slack is what a call may take beyond what it should on a noisy 2-core box
// under the race detector. The assertions are about "bounded by the budget
// or the loader, not by Redis", so they can afford to be wide.
const slack = 200 * time.Millisecond

// quickBreaker probes 200 ms after opening instead of 1 s, so recovery
// tests are short.
var quickBreaker = redis.BreakerOptions{OpenTimeout: 200 * time.Millisecond, MaxOpenTimeout: 400 * time.Millisecond}

// readPath is a Cache with one namespace over a Tier on its own server.
type readPath struct {
	srv   *redistest.Server
	tier  *redis.Tier
	cache *holdfast.Cache
	ns    *holdfast.Namespace
}

// newReadPath starts a server and builds the stack. Cleanup closes the Cache,
// then the Tier, then kills the server (t.Cleanup runs last-in first-out).
func newReadPath(t *testing.T, to redis.Options, co holdfast.Options, p holdfast.Policy) *readPath {
	t.Helper()
	srv := redistest.Standalone(t)
	to.Addrs = []string{srv.Addr()}
	tier, err := redis.New(to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close() })
	co.Shared = tier
	if co.Logger == nil {
		co.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cache, err := holdfast.New(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	ns, err := cache.Namespace("product", p)
	if err != nil {
		t.Fatal(err)
	}
	return &readPath{srv: srv, tier: tier, cache: cache, ns: ns}
}

// cli runs redis-cli against the server, failing the test on error.
func (rp *readPath) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := rp.srv.CLI(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// countingLoader returns "value-of-<key>" and counts its calls per key.
type countingLoader struct {
	mu    sync.Mutex
	calls map[string]int
	// before, when set, runs inside the load before it returns.
	before func(ctx context.Context, key string)
}

func (l *countingLoader) Load(ctx context.Context, key string) ([]byte, error) {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = make(map[string]int)
	}
	l.calls[key]++
	before := l.before
	l.mu.Unlock()
	if before != nil {
		before(ctx, key)
	}
	return valueOf(key), nil
}

func (l *countingLoader) n(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

func (l *countingLoader) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		n += c
	}
	return n
}

func valueOf(key string) []byte { return []byte("value-of-" + key) }

// get reads key and fails the test unless it got the loader's value without
// error within limit.
func (rp *readPath) get(t *testing.T, key string, l holdfast.Loader, limit time.Duration) holdfast.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := rp.ns.Get(ctx, key, l)
	d := time.Since(start)
	if err != nil {
		t.Fatalf("Get %q: %v (after %v)", key, err, d)
	}
	if !bytes.Equal(res.Value, valueOf(key)) {
		t.Fatalf("Get %q = %q from %v", key, res.Value, res.Source)
	}
	if d > limit {
		t.Errorf("Get %q took %v from %v, limit %v", key, d, res.Source, limit)
	}
	return res
}

// gated is a loader that, on its first call, signals entered and blocks until
// release is closed; later calls return at once.
type gated struct {
	countingLoader
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func newGated() *gated {
	g := &gated{entered: make(chan struct{}), release: make(chan struct{})}
	g.before = func(ctx context.Context, key string) {
		first := false
		g.once.Do(func() { first = true })
		if !first {
			return
		}
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
		}
	}
	return g
}

// midLoad starts readers concurrent Gets of key whose load blocks, runs
// fail (kill or freeze Redis) while the load is in flight, releases the
// load and checks that every reader got the value without error and that
// the loader ran once.
func midLoad(t *testing.T, rp *readPath, key string, readers int, fail func()) *gated {
	t.Helper()
	l := newGated()
	type answer struct {
		res holdfast.Result
		err error
	}
	answers := make(chan answer, readers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range readers {
		go func() {
			res, err := rp.ns.Get(ctx, key, l.Load)
			answers <- answer{res, err}
		}()
	}
	select {
	case <-l.entered:
	case <-ctx.Done():
		t.Fatal("loader never called")
	}
	// Every reader must have joined the flight before Redis fails, or a
	// late one would read after the load and count for something else.
	eventually(t, 5*time.Second, func() bool { return rp.ns.Stats().Get("coalesced") >= uint64(readers-1) })
	fail()
	close(l.release)
	for range readers {
		a := <-answers
		if a.err != nil {
			t.Fatalf("reader got error %v", a.err)
		}
		// One reader ran the load; the others joined it.
		if !bytes.Equal(a.res.Value, valueOf(key)) || a.res.Source != holdfast.SourceLoaded || a.res.Reason != 0 {
			t.Fatalf("reader got %q from %v for %v", a.res.Value, a.res.Source, a.res.Reason)
		}
	}
	if n := l.n(key); n != 1 {
		t.Fatalf("loader ran %d times for %d concurrent readers, want 1", n, readers)
	}
	return l
}

// waitFlight waits until no fetch of key is in progress, its shared-tier
// write included.
func waitFlight(t *testing.T, rp *readPath, key string) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool { return !testhook.Loading(rp.ns, key) })
}

// eventually polls cond every 5 ms and fails the test if it is not true
// within d.
func eventually(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// policyLKG keeps values 30 s past hard for stale-if-error, so that the
// last-known-good store holds them, with the hot tier off so every read
// reaches the shared tier.
var policyLKG = holdfast.Policy{TTL: time.Minute, StaleIfError: 30 * time.Second, Hot: holdfast.HotPolicy{MaxBytes: -1}}

// TestReadPathKilledMidLoad: Redis is SIGKILLed while a load is in flight
// and 16 readers wait on it. Each gets the loaded value, none an error, and
// the loader runs once (its SET fails, which never fails a read). Later reads
// of that key are served from last-known-good within the loader's time;
// a key never seen goes to the loader; nothing is an error. After a restart
// (empty) the breaker closes and writes reach Redis again.
func TestReadPathKilledMidLoad(t *testing.T) {
	rp := newReadPath(t, redis.Options{Breaker: quickBreaker}, holdfast.Options{}, policyLKG)
	midLoad(t, rp, "k1", 16, rp.srv.Kill)
	// The flight goes on with its SET after answering; a read before it
	// ends would join it. Wait for it, so the reads below are new ones.
	waitFlight(t, rp, "k1")

	l := &countingLoader{}
	for i := 0; i < 50; i++ {
		res := rp.get(t, "k1", l.Load, redis.DefaultReadBudget+slack)
		if res.Source != holdfast.SourceMemory || res.Reason != holdfast.ReasonTierDown {
			t.Fatalf("read %d after kill from %v for %v, want memory, tier down", i, res.Source, res.Reason)
		}
		rp.get(t, fmt.Sprint("new", i), l.Load, redis.DefaultReadBudget+slack)
	}
	if n := l.n("k1"); n != 0 {
		t.Fatalf("loader ran %d times for a key in last-known-good", n)
	}
	if n := l.total(); n != 50 {
		t.Fatalf("loader ran %d times for 50 new keys", n)
	}
	st, ts := rp.ns.Stats(), rp.tier.Stats()
	t.Logf("after kill: ns %+v", st)
	t.Logf("after kill: tier %+v", ts)
	if st.Get("local_served") < 50 || st.Get("shared.hits") != 0 || ts.BreakerOpens == 0 || st.Get("shared.bypassed") == 0 {
		t.Fatalf("stats after kill: ns %+v tier %+v", st, ts)
	}

	rp.srv.Restart()
	waitShared(t, rp, "k1", l.Load, 10*time.Second)
}

// waitShared reads key until it is a shared-tier hit again: the breaker has
// closed and the value written after recovery is read back from Redis. It
// fails the test after d.
func waitShared(t *testing.T, rp *readPath, key string, l holdfast.Loader, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		res := rp.get(t, key, l, redis.DefaultReadBudget+slack)
		if res.Source == holdfast.SourceShared && rp.tier.Stats().BreakerState == redis.BreakerClosed {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no shared hit for %q within %v: ns %+v, tier %+v", key, d, rp.ns.Stats(), rp.tier.Stats())
}

// TestReadPathFrozenMidLoad: Redis is SIGSTOPped while a load is in flight.
// The waiting readers get the value at once (not after the SET's timeout),
// and for the next second 8 readers over 20 keys, known and new, keep
// getting answers within the read budget plus slack, with no error.
func TestReadPathFrozenMidLoad(t *testing.T) {
	rp := newReadPath(t, redis.Options{Breaker: quickBreaker}, holdfast.Options{}, policyLKG)
	l := &countingLoader{}
	for i := range 10 {
		rp.get(t, fmt.Sprint("known", i), l.Load, time.Second)
	}
	start := time.Now()
	midLoad(t, rp, "k1", 16, rp.srv.Freeze)
	if d := time.Since(start); d > redis.DefaultWriteTimeout {
		// The readers were answered before the flight's SET, which waits
		// WriteTimeout on the frozen server.
		t.Errorf("readers waited %v for a load released at once", d)
	}

	var wg sync.WaitGroup
	var reads, slow atomic.Int64
	var mu sync.Mutex
	var worst time.Duration
	// sources counts the reads by where they came from and why.
	type how struct {
		src       holdfast.Source
		why       holdfast.Reason
		collapsed bool
	}
	sources := map[how]int{}
	stop := time.Now().Add(time.Second)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				key := fmt.Sprint("known", (g+i)%10)
				if i%2 == 1 {
					key = fmt.Sprint("new", g, "-", i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				t0 := time.Now()
				res, err := rp.ns.Get(ctx, key, l.Load)
				d := time.Since(t0)
				cancel()
				if err != nil || !bytes.Equal(res.Value, valueOf(key)) {
					t.Errorf("Get %q while frozen: %q, %v", key, res.Value, err)
					return
				}
				reads.Add(1)
				if d > redis.DefaultReadBudget+slack {
					slow.Add(1)
					t.Errorf("Get %q took %v while frozen (%v)", key, d, res.Source)
				}
				mu.Lock()
				worst = max(worst, d)
				sources[how{res.Source, res.Reason, res.Collapsed}]++
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	st, ts := rp.ns.Stats(), rp.tier.Stats()
	t.Logf("frozen 1 s: %d reads, slowest %v, sources %v", reads.Load(), worst, sources)
	t.Logf("frozen: ns %+v", st)
	t.Logf("frozen: tier %+v", ts)
	if sources[how{holdfast.SourceMemory, holdfast.ReasonTierDown, false}] == 0 || sources[how{src: holdfast.SourceLoaded}] == 0 || sources[how{src: holdfast.SourceShared}] != 0 || ts.BreakerOpens == 0 {
		t.Fatalf("sources %v, tier %+v", sources, ts)
	}
	// A known key is loaded at most once (before the freeze): the rest come
	// from last-known-good.
	for i := range 10 {
		if n := l.n(fmt.Sprint("known", i)); n != 1 {
			t.Errorf("known%d loaded %d times", i, n)
		}
	}
	rp.srv.Thaw()
}

// TestReadPathFailDuringPut is the double-load case of Spring's cache, whose
// loader ran twice for one request when Redis failed during the put: Redis
// fails between the loader's return and the SET of its value (the loader
// itself freezes or kills the server just before returning). 16 concurrent
// readers of the key get the value, the loader runs exactly once, and the
// readers do not wait for the SET: they are answered while it is still
// pending on the frozen server. Later reads of the key do not load again.
func TestReadPathFailDuringPut(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(*redistest.Server)
	}{
		{"freeze", (*redistest.Server).Freeze},
		{"kill", (*redistest.Server).Kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, hot := range []bool{true, false} {
				t.Run(fmt.Sprintf("hot=%v", hot), func(t *testing.T) {
					p := policyLKG
					if !hot {
						p.Hot.MaxBytes = -1 // no hot tier
					}
					rp := newReadPath(t, redis.Options{Breaker: quickBreaker}, holdfast.Options{}, p)
					failDuringPut(t, rp, func() { tc.fail(rp.srv) })
				})
			}
		})
	}
}

func failDuringPut(t *testing.T, rp *readPath, fail func()) {
	const key, readers = "k1", 16
	setsBefore := rp.tier.Stats().Sets
	var loaderDone atomic.Int64 // unix nanos when the loader returned
	l := &countingLoader{}
	l.before = func(context.Context, string) {
		// Let the other readers arrive and join the flight first.
		time.Sleep(20 * time.Millisecond)
		fail()
		loaderDone.Store(time.Now().UnixNano())
	}
	var wg sync.WaitGroup
	var latest atomic.Int64 // unix nanos of the last reader's answer
	gate := make(chan struct{})
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			<-gate
			res, err := rp.ns.Get(ctx, key, l.Load)
			now := time.Now().UnixNano()
			for {
				old := latest.Load()
				if now <= old || latest.CompareAndSwap(old, now) {
					break
				}
			}
			if err != nil || !bytes.Equal(res.Value, valueOf(key)) {
				t.Errorf("Get: %q, %v", res.Value, err)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if n := l.n(key); n != 1 {
		t.Fatalf("loader ran %d times for one key when Redis failed during the put, want 1", n)
	}
	// The answers came before the SET could have finished: on a frozen
	// server it waits WriteTimeout (100 ms).
	if wait := time.Duration(latest.Load() - loaderDone.Load()); wait > redis.DefaultWriteTimeout/2 {
		t.Errorf("last reader answered %v after the loader returned; readers must not wait on the SET", wait)
	}
	// The SET was attempted after the answers, and failed.
	waitFlight(t, rp, key)
	st, ts := rp.ns.Stats(), rp.tier.Stats()
	if ts.Sets != setsBefore+1 || st.Get("shared.set_errors")+st.Get("shared.bypassed") == 0 {
		t.Fatalf("expected one failed SET: ns %+v tier %+v", st, ts)
	}
	// Later reads, with Redis still down: no second load.
	for i := 0; i < 20; i++ {
		res := rp.get(t, key, l.Load, redis.DefaultReadBudget+slack)
		if res.Source != holdfast.SourceHot && !fromMemoryFor(res, holdfast.ReasonTierDown, holdfast.ReasonTierSlow) {
			t.Fatalf("later read from %v for %v", res.Source, res.Reason)
		}
	}
	if n := l.n(key); n != 1 {
		t.Fatalf("loader ran %d times in all, want 1", n)
	}
	t.Logf("ns %+v", st)
}

// getShared reads key until it is a shared-tier hit. On a busy machine a
// read can outlast the slow-read delay and be answered from memory while it
// goes on: the tier was asked, and the key's next read is a hit. Any other
// source, or 10 slow reads in a row, fails the test.
func (rp *readPath) getShared(t *testing.T, when, key string, l holdfast.Loader) {
	t.Helper()
	for try := 1; ; try++ {
		res := rp.get(t, key, l, time.Second)
		if res.Source == holdfast.SourceShared {
			return
		}
		if !fromMemoryFor(res, holdfast.ReasonTierSlow) || try == 10 {
			t.Fatalf("%s: %q from %v for %v (read %d)", when, key, res.Source, res.Reason, try)
		}
	}
}

// TestReadPathRecoveryClosesBreaker: with Redis frozen, reads open the
// breaker and are served from memory (not waiting past the slow-read
// delay), then from last-known-good (bypassed);
// after Thaw, half-open probes close the breaker and reads are shared-tier
// hits again, with no load.
func TestReadPathRecoveryClosesBreaker(t *testing.T) {
	rp := newReadPath(t, redis.Options{Breaker: quickBreaker}, holdfast.Options{}, policyLKG)
	l := &countingLoader{}
	keys := []string{"a", "b", "c", "d"}
	for _, k := range keys {
		rp.get(t, k, l.Load, time.Second)
	}
	for _, k := range keys {
		waitFlight(t, rp, k) // the flight writes to Redis after answering
	}
	for _, k := range keys {
		rp.getShared(t, "before freeze", k, l.Load)
	}
	rp.srv.Freeze()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; rp.tier.Stats().BreakerState != redis.BreakerOpen || rp.ns.Stats().Get("shared.bypassed") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("breaker not open: %+v", rp.tier.Stats())
		}
		// From memory once a read outlasts the slow-read delay, from
		// last-known-good once the breaker bypasses Redis.
		if res := rp.get(t, keys[i%len(keys)], l.Load, redis.DefaultReadBudget+slack); !fromMemoryFor(res, holdfast.ReasonTierDown, holdfast.ReasonTierSlow) {
			t.Fatalf("frozen: from %v for %v", res.Source, res.Reason)
		}
	}
	rp.srv.Thaw()
	waitShared(t, rp, "a", l.Load, 10*time.Second)
	before := rp.ns.Stats()
	for _, k := range keys {
		rp.getShared(t, "after thaw", k, l.Load)
	}
	after, ts := rp.ns.Stats(), rp.tier.Stats()
	if after.Get("shared.hits")-before.Get("shared.hits") < uint64(len(keys)) || after.Get("shared.bypassed") != before.Get("shared.bypassed") || ts.BreakerState != redis.BreakerClosed {
		t.Fatalf("after thaw: ns %+v, tier %+v", after, ts)
	}
	if n := l.total(); n != len(keys) {
		t.Fatalf("loader ran %d times for %d keys; recovery must not reload", n, len(keys))
	}
	t.Logf("tier %+v", ts)
}

// TestReadPathCorruptBytes: bytes that are not a valid envelope, written
// straight into Redis under a holdfast key (by redis-cli and by a raw
// client, as another program would), read as a miss: the loader runs, the
// caller gets the loaded value, Stats.Corrupt counts it, nothing panics, and
// the loaded value replaces the junk in Redis.
func TestReadPathCorruptBytes(t *testing.T) {
	// Every read here must reach Redis and decode what it holds: on a busy
	// machine one slower than the slow-read delay would be answered from
	// the copy in memory instead, and the junk under it never read.
	p := policyLKG
	p.SlowReadGrace = -1
	rp := newReadPath(t, redis.Options{}, holdfast.Options{}, p)
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rp.srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A valid envelope to damage, written by the cache itself.
	// stored reports whether Redis holds a valid envelope under key: the
	// flight writes it after answering its readers.
	stored := func(key string) []byte {
		b, err := raw.Do(ctx, raw.B().Get().Key("product:"+key).Build()).AsBytes()
		if err != nil {
			return nil
		}
		if _, err := tier.DecodeEntry(b); err != nil {
			return nil
		}
		return b
	}
	l := &countingLoader{}
	rp.get(t, "model", l.Load, time.Second)
	waitFlight(t, rp, "model")
	good := stored("model")
	if good == nil {
		t.Fatal("the cache's own envelope is not in Redis")
	}
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	huge := bytes.Clone(good)
	copy(huge[32:36], []byte{0xff, 0xff, 0xff, 0xff}) // payload length 4 GiB
	junk := map[string][]byte{
		"empty":       {},
		"text":        []byte("not an envelope"),
		"resp":        []byte("\x00\xff\xfe garbage \r\n$-1\r\n"),
		"header-only": good[:40],
		"truncated":   good[:len(good)-1],
		"extended":    append(bytes.Clone(good), 'x'),
		"bad-magic":   flip(0),
		"bad-version": flip(2),
		"bad-flags":   flip(3),
		"bad-times":   flip(12),
		"bad-crc":     flip(37),
		"bad-payload": flip(len(good) - 1),
		"huge-length": huge,
		"json":        []byte(`{"id":1,"name":"a product"}`),
	}
	var names []string
	for name, b := range junk {
		names = append(names, name)
		if err := raw.Do(ctx, raw.B().Set().Key("product:"+name).Value(string(b)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// And one through redis-cli, the way an operator would.
	rp.cli(t, "SET", "product:cli", "hello from redis-cli")
	names = append(names, "cli")

	before := rp.ns.Stats()
	for _, name := range names {
		res := rp.get(t, name, l.Load, time.Second)
		if res.Source != holdfast.SourceLoaded {
			t.Errorf("%s: corrupt bytes served from %v", name, res.Source)
		}
		if n := l.n(name); n != 1 {
			t.Errorf("%s: loader ran %d times", name, n)
		}
	}
	st := rp.ns.Stats()
	if got := st.Get("corrupt_entries") - before.Get("corrupt_entries"); got != uint64(len(names)) {
		t.Fatalf("Corrupt counted %d, want %d: %+v", got, len(names), st)
	}
	if st.Get("shared.errors") != 0 {
		t.Fatalf("corrupt bytes counted as tier errors: %+v", st)
	}
	// The load replaced the junk: the next reads are shared hits.
	for _, name := range names {
		waitFlight(t, rp, name)
		if stored(name) == nil {
			t.Fatalf("%s: no valid envelope in Redis after the load", name)
		}
	}
	for _, name := range names {
		if res := rp.get(t, name, l.Load, time.Second); res.Source != holdfast.SourceShared {
			t.Errorf("%s: after reload from %v", name, res.Source)
		}
	}

	// The batch path decodes the same way.
	for _, name := range names {
		if err := raw.Do(ctx, raw.B().Set().Key("product:"+name).Value("junk-"+name).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	before = rp.ns.Stats()
	bl := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		m := make(map[string][]byte, len(keys))
		for _, k := range keys {
			m[k], _ = l.Load(ctx, k)
		}
		return m, nil
	}
	results, errs := rp.ns.GetMany(ctx, names, bl)
	if errs != nil {
		t.Fatalf("GetMany: %v", errs)
	}
	for i, name := range names {
		if !bytes.Equal(results[i].Value, valueOf(name)) || results[i].Source != holdfast.SourceLoaded {
			t.Errorf("GetMany %s: %q from %v", name, results[i].Value, results[i].Source)
		}
	}
	if got := rp.ns.Stats().Get("corrupt_entries") - before.Get("corrupt_entries"); got != uint64(len(names)) {
		t.Fatalf("GetMany: Corrupt counted %d, want %d", got, len(names))
	}
}

// TestReadPathOversizedRefused: a loaded value over the namespace's
// MaxValueBytes is returned to its caller but cached nowhere (not written to
// Redis: EXISTS is 0); one over the tier's MaxStoredBytes but within the
// namespace's is cached in process and refused by the tier, nothing sent.
// Neither is an error for the reader.
func TestReadPathOversizedRefused(t *testing.T) {
	p := policyLKG
	p.Hot.MaxBytes = 0   // a hot tier, so the tier-refused value is still cached in process
	p.Hot.Threshold = -1 // of every key
	p.MaxValueBytes = 4 << 10
	rp := newReadPath(t, redis.Options{MaxStoredBytes: 1 << 10}, holdfast.Options{}, p)
	// Hot copies loaded before the stream is first heard are checked
	// against Redis once it is, and the tier-refused one, which Redis
	// does not hold, would be dropped then.
	for deadline := time.Now().Add(10 * time.Second); !testhook.StreamHeard(rp.cache); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stream not heard after 10 s")
		}
	}
	sizes := map[string]int{"small": 100, "tier-big": 2 << 10, "ns-big": 8 << 10}
	var loads sync.Map
	l := func(_ context.Context, key string) ([]byte, error) {
		n, _ := loads.LoadOrStore(key, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return bytes.Repeat([]byte{'v'}, sizes[key]), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for key, size := range sizes {
		res, err := rp.ns.Get(ctx, key, l)
		if err != nil || len(res.Value) != size || res.Source != holdfast.SourceLoaded {
			t.Fatalf("%s: %d bytes from %v, %v", key, len(res.Value), res.Source, err)
		}
	}
	if got := rp.cli(t, "EXISTS", "product:small"); got != "1" {
		t.Fatalf("EXISTS product:small = %s", got)
	}
	for _, key := range []string{"tier-big", "ns-big"} {
		if got := rp.cli(t, "EXISTS", "product:"+key); got != "0" {
			t.Fatalf("EXISTS product:%s = %s: an oversized value reached Redis", key, got)
		}
	}
	for key := range sizes {
		waitFlight(t, rp, key) // the flights write after answering
	}
	st, ts := rp.ns.Stats(), rp.tier.Stats()
	if st.Get("too_large") != 1 || ts.TooLarge != 1 || ts.Sets != 2 || st.Get("shared.set_errors") != 1 || ts.BreakerOpens != 0 {
		t.Fatalf("ns %+v, tier %+v", st, ts)
	}
	// The tier-refused value is still cached in process (hot tier); the
	// namespace-refused one is loaded again on every read.
	for range 3 {
		res, err := rp.ns.Get(ctx, "tier-big", l)
		if err != nil || res.Source != holdfast.SourceHot {
			t.Fatalf("tier-big again: %v, %v", res.Source, err)
		}
		if _, err := rp.ns.Get(ctx, "ns-big", l); err != nil {
			t.Fatal(err)
		}
	}
	count := func(k string) int64 { n, _ := loads.Load(k); return n.(*atomic.Int64).Load() }
	if count("ns-big") != 4 || count("tier-big") != 1 {
		t.Fatalf("ns-big loaded %d times, want 4 (never cached); tier-big %d, want 1", count("ns-big"), count("tier-big"))
	}
}

// fromMemoryFor reports whether res came from last-known-good for one of
// whys.
func fromMemoryFor(res holdfast.Result, whys ...holdfast.Reason) bool {
	return res.Source == holdfast.SourceMemory && slices.Contains(whys, res.Reason)
}
