package redis

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// margin is what a call may take beyond its budget on a noisy 2-core box:
// scheduling, the race detector, GC. The assertions are about "bounded by
// the budget, not by Redis", so they can afford to be wide.
const margin = 200 * time.Millisecond

func newTier(t *testing.T, o Options) *Tier {
	t.Helper()
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// serverAddrs starts a standalone server or a Cluster, as mode says
// ("standalone" or "cluster"), and returns its addresses.
func serverAddrs(t *testing.T, mode string) []string {
	t.Helper()
	if mode == "standalone" {
		return []string{redistest.Standalone(t).Addr()}
	}
	return redistest.Cluster(t).Addrs()
}

// rawClient is a plain rueidis client for writing straight into Redis.
func rawClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// commandCalls returns how many times srv ran cmd (INFO commandstats).
func commandCalls(t *testing.T, srv *redistest.Server, cmd string) int {
	t.Helper()
	info, err := srv.Info(ctxT(t, 5*time.Second), "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	v, ok := info["cmdstat_"+cmd]
	if !ok {
		return 0
	}
	// "calls=3,usec=...,..."
	f, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
	n, err := strconv.Atoi(f)
	if err != nil {
		t.Fatalf("commandstats %s: %q", cmd, v)
	}
	return n
}

func TestHitMissAndWrites(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, KeyPrefix: "app:"})
	ctx := ctxT(t, 10*time.Second)
	if tr.Cluster() {
		t.Fatal("standalone server detected as Cluster")
	}

	if err := tr.Set(ctx, tier.Item{Key: "ns:a", Value: []byte("va"), TTL: time.Minute},
		tier.Item{Key: "ns:b", Value: []byte{}, TTL: 1500 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	v, found, err := tr.Get(ctx, "ns:a")
	if err != nil || !found || string(v) != "va" {
		t.Fatalf("Get hit = %q, %v, %v", v, found, err)
	}
	v, found, err = tr.Get(ctx, "ns:missing")
	if err != nil || found || v != nil {
		t.Fatalf("Get miss = %q, %v, %v; a miss must not be an error", v, found, err)
	}
	// KeyPrefix is prepended verbatim; the TTL is set with PX.
	if got, _ := srv.CLI(ctx, "GET", "app:ns:a"); got != "va" {
		t.Fatalf("raw GET app:ns:a = %q", got)
	}
	pttl, _ := srv.CLI(ctx, "PTTL", "app:ns:a")
	if ms, _ := strconv.Atoi(pttl); ms <= 50_000 || ms > 60_000 {
		t.Fatalf("PTTL = %s, want about 60000", pttl)
	}

	// GetMany keeps order and tells hits from misses.
	ls, err := tr.GetMany(ctx, []string{"ns:missing", "ns:a", "ns:a"})
	if err != nil {
		t.Fatal(err)
	}
	if ls[0].Found || ls[0].Err != nil || !ls[1].Found || string(ls[1].Value) != "va" || !ls[2].Found {
		t.Fatalf("GetMany = %+v", ls)
	}

	if err := tr.Delete(ctx, "ns:a", "ns:missing"); err != nil {
		t.Fatal(err)
	}
	if _, found, err := tr.Get(ctx, "ns:a"); found || err != nil {
		t.Fatalf("after Delete: found %v, err %v", found, err)
	}
	if err := tr.Set(ctx, tier.Item{Key: "ns:c", Value: []byte("x")}); err == nil {
		t.Fatal("Set with zero TTL accepted")
	}

	st := tr.Stats()
	if st.Gets != 6 || st.Hits != 3 || st.Misses != 3 || st.Errors != 0 || st.Sets != 3 ||
		st.SetErrors != 1 || st.Deletes != 2 || st.BreakerState != BreakerClosed {
		t.Fatalf("stats = %+v", st)
	}

	_ = tr.Close()
	if _, _, err := tr.Get(ctx, "ns:a"); !errors.Is(err, holdfast.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

// TestCorruptBytes: bytes the Cache cannot decode come back as a hit with
// exactly those bytes; the Cache, not the tier, counts them as corrupt.
func TestCorruptBytes(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	ctx := ctxT(t, 10*time.Second)
	junk := "\x00\xff\xfe garbage \r\n$-1\r\n"
	raw := rawClient(t, srv.Addr())
	if err := raw.Do(ctx, raw.B().Set().Key("ns:junk").Value(junk).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	v, found, err := tr.Get(ctx, "ns:junk")
	if err != nil || !found || !bytes.Equal(v, []byte(junk)) {
		t.Fatalf("Get = %q, %v, %v", v, found, err)
	}
	v[0] = 'X' // the caller owns the slice
	ls, err := tr.GetMany(ctx, []string{"ns:junk"})
	if err != nil || !ls[0].Found || string(ls[0].Value) != junk {
		t.Fatalf("GetMany = %+v, %v", ls, err)
	}

	// A key of another type (someone else's list) is an error for that
	// read, and does not count against Redis's health.
	if _, err := srv.CLI(ctx, "RPUSH", "ns:list", "x"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*consecutiveFailures; i++ {
		if _, _, err := tr.Get(ctx, "ns:list"); err == nil {
			t.Fatal("GET of a list succeeded")
		}
	}
	if st := tr.Stats(); st.BreakerOpens != 0 {
		t.Fatalf("WRONGTYPE opened the breaker: %+v", st)
	}
}

// consecutiveFailures is the breaker's default run of failures that opens it.
const consecutiveFailures = breaker.DefaultConsecutiveFailures

// TestTooLarge: oversized keys and values are refused with ErrTooLarge and
// never reach Redis.
func TestTooLarge(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, KeyPrefix: "p:", MaxKeyBytes: 16, MaxStoredBytes: 8})
	ctx := ctxT(t, 10*time.Second)
	sets, gets, mgets := commandCalls(t, srv, "set"), commandCalls(t, srv, "get"), commandCalls(t, srv, "mget")

	long := "ns:" + strings.Repeat("k", 14) // 2 + 17 bytes > 16
	err := tr.Set(ctx, tier.Item{Key: "ns:v", Value: []byte("123456789"), TTL: time.Minute})
	if !errors.Is(err, holdfast.ErrTooLarge) {
		t.Fatalf("oversized value: %v", err)
	}
	if err := tr.Set(ctx, tier.Item{Key: long, Value: []byte("1"), TTL: time.Minute}); !errors.Is(err, holdfast.ErrTooLarge) {
		t.Fatalf("oversized key: %v", err)
	}
	if _, _, err := tr.Get(ctx, long); !errors.Is(err, holdfast.ErrTooLarge) {
		t.Fatalf("Get oversized key: %v", err)
	}
	ls, err := tr.GetMany(ctx, []string{long})
	if err != nil || !errors.Is(ls[0].Err, holdfast.ErrTooLarge) {
		t.Fatalf("GetMany oversized key: %+v, %v", ls, err)
	}
	if got := commandCalls(t, srv, "set"); got != sets {
		t.Fatalf("SET sent %d times for refused items", got-sets)
	}
	if g, m := commandCalls(t, srv, "get"), commandCalls(t, srv, "mget"); g != gets || m != mgets {
		t.Fatal("GET/MGET sent for a refused key")
	}
	// One bad item does not stop the others.
	err = tr.Set(ctx, tier.Item{Key: "ns:ok", Value: []byte("1"), TTL: time.Minute},
		tier.Item{Key: "ns:big", Value: []byte("123456789"), TTL: time.Minute})
	if !errors.Is(err, holdfast.ErrTooLarge) {
		t.Fatalf("mixed batch: %v", err)
	}
	if v, _ := srv.CLI(ctx, "EXISTS", "p:ns:ok", "p:ns:big"); v != "1" {
		t.Fatalf("EXISTS ok big = %s, want 1", v)
	}
	if st := tr.Stats(); st.TooLarge != 5 || st.BreakerOpens != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// fastBreaker keeps the real-process tests short: the breaker opens as by
// default but probes after 200 ms instead of 1 s.
var fastBreaker = BreakerOptions{OpenTimeout: 200 * time.Millisecond, MaxOpenTimeout: 400 * time.Millisecond}

// timedGet runs a Get and fails the test if it took longer than limit.
func timedGet(t *testing.T, tr *Tier, key string, limit time.Duration) error {
	t.Helper()
	start := time.Now()
	_, _, err := tr.Get(context.Background(), key)
	if d := time.Since(start); d > limit {
		t.Errorf("Get took %v, limit %v (err %v)", d, limit, err)
	}
	return err
}

// waitClosed polls Get until the breaker has closed again and a read
// succeeds, for at most d.
func waitRecovered(t *testing.T, tr *Tier, key string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		_, _, err := tr.Get(context.Background(), key)
		if err == nil && tr.Stats().BreakerState == BreakerClosed {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("not recovered within %v: %+v", d, tr.Stats())
}

// TestKilled: with Redis killed, every Get fails within its budget, the
// breaker opens and reads are bypassed; after a restart (empty) half-open
// probes close it and the old key is a miss.
func TestKilled(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Breaker: fastBreaker})
	ctx := ctxT(t, 20*time.Second)
	if err := tr.Set(ctx, tier.Item{Key: "ns:k", Value: []byte("v"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	var failed, bypassed int
	for i := 0; i < 30; i++ {
		err := timedGet(t, tr, "ns:k", DefaultReadBudget+margin)
		switch {
		case errors.Is(err, tier.ErrBypassed):
			bypassed++
		case err != nil:
			failed++
		default:
			t.Fatal("Get succeeded against a killed server")
		}
	}
	st := tr.Stats()
	if failed < consecutiveFailures || bypassed == 0 || st.BreakerOpens == 0 {
		t.Fatalf("failed %d, bypassed %d, stats %+v", failed, bypassed, st)
	}
	if err := tr.Set(ctx, tier.Item{Key: "ns:k", Value: []byte("v"), TTL: time.Minute}); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("Set with open breaker: %v", err)
	}

	srv.Restart()
	waitRecovered(t, tr, "ns:k", 10*time.Second)
	if _, found, err := tr.Get(ctx, "ns:k"); found || err != nil {
		t.Fatalf("after restart-empty: found %v, err %v", found, err)
	}
}

// TestFrozen: a SIGSTOPped Redis accepts connections and never answers.
// Every Get returns within budget + margin, concurrently too; the breaker
// opens; after Thaw half-open probes close it.
func TestFrozen(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Breaker: fastBreaker})
	ctx := ctxT(t, 30*time.Second)
	if err := tr.Set(ctx, tier.Item{Key: "ns:k", Value: []byte("v"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	// 8 readers for 1.5 s: through the first timeouts, the open breaker,
	// failed probes with backoff, and the PingTimeout closing the silent
	// connection (1 s) followed by reconnects to the frozen server.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var hits, timeouts, bypassed, other int
	var worst time.Duration
	stop := time.Now().Add(1500 * time.Millisecond)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				var err error
				if g%4 == 0 {
					_, err = tr.GetMany(context.Background(), []string{"ns:k", "ns:x"})
				} else {
					_, _, err = tr.Get(context.Background(), "ns:k")
				}
				d := time.Since(start)
				mu.Lock()
				switch {
				case err == nil:
					hits++
				case errors.Is(err, tier.ErrBypassed):
					bypassed++
				case errors.Is(err, context.DeadlineExceeded):
					timeouts++
				default:
					other++
				}
				worst = max(worst, d)
				mu.Unlock()
				if d > DefaultReadBudget+margin {
					t.Errorf("read took %v while frozen (err %v)", d, err)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	// A write while frozen is bounded by WriteTimeout (or bypassed).
	start := time.Now()
	if err := tr.Set(context.Background(), tier.Item{Key: "ns:w", Value: []byte("v"), TTL: time.Minute}); err == nil {
		t.Error("Set succeeded against a frozen server")
	}
	if d := time.Since(start); d > DefaultWriteTimeout+margin {
		t.Errorf("Set took %v while frozen", d)
	}
	wg.Wait()
	st := tr.Stats()
	t.Logf("frozen: hits %d timeouts %d bypassed %d other %d, slowest read %v; %+v", hits, timeouts, bypassed, other, worst, st)
	if hits != 0 || timeouts == 0 || bypassed == 0 || st.BreakerOpens == 0 {
		t.Fatalf("hits %d, timeouts %d, bypassed %d, stats %+v", hits, timeouts, bypassed, st)
	}
	// The breaker must be what answers most reads, not the budget: each
	// reader waits the budget only until the breaker opens, a budget and
	// two confirming PINGs after the freeze.
	opening := DefaultReadBudget + 2*silentConfirm + margin
	if most := 8 * int(opening/(DefaultReadBudget+5*time.Millisecond)+1); timeouts > most {
		t.Errorf("%d reads waited for the budget, more than the %d before the breaker opens; the breaker should bypass most", timeouts, most)
	}

	srv.Thaw()
	waitRecovered(t, tr, "ns:k", 10*time.Second)
	v, found, err := tr.Get(ctx, "ns:k")
	if err != nil || !found || string(v) != "v" {
		t.Fatalf("after thaw: %q, %v, %v", v, found, err)
	}
	if st := tr.Stats(); st.BreakerState != BreakerClosed || st.BreakerTransitions < 3 {
		t.Fatalf("after thaw: %+v", st)
	}
}

// TestCallerCancelNotCounted: reads the caller cancels while Redis is frozen
// return promptly with context.Canceled and never open the breaker.
func TestCallerCancelNotCounted(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, ReadBudget: time.Second})
	// Open all of rueidis's connections first (it picks one at random per
	// call and dials lazily): a connection handshake with a frozen server
	// is bounded by the budget but does not see the cancellation.
	for i := 0; i < 100; i++ {
		if _, _, err := tr.Get(context.Background(), "ns:k"); err != nil {
			t.Fatal(err)
		}
	}
	srv.Freeze()
	for i := 0; i < 3*consecutiveFailures; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(5*time.Millisecond, cancel)
		start := time.Now()
		_, _, err := tr.Get(ctx, "ns:k")
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Get: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > margin {
			t.Fatalf("cancelled Get %d took %v", i, d)
		}
	}
	if st := tr.Stats(); st.BreakerOpens != 0 || st.BreakerState != BreakerClosed {
		t.Fatalf("caller cancellations counted: %+v", st)
	}
	srv.Thaw()
}

func TestNewValidates(t *testing.T) {
	for _, o := range []Options{
		{},
		{Addrs: []string{"no-port"}},
		{Addrs: []string{"127.0.0.1:1"}, ReadBudget: -1},
		{Addrs: []string{"127.0.0.1:1"}, KeyPrefix: "{tag}"},
		{Addrs: []string{"127.0.0.1:1"}, Breaker: BreakerOptions{FailureRate: 2}},
	} {
		if tr, err := New(o); err == nil {
			_ = tr.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
	// Nothing listening: New fails fast instead of hanging.
	srv := redistest.Standalone(t)
	addr := srv.Addr()
	srv.Kill()
	start := time.Now()
	if tr, err := New(Options{Addrs: []string{addr}, DialTimeout: 200 * time.Millisecond}); err == nil {
		_ = tr.Close()
		t.Fatal("New connected to a killed server")
	}
	if d := time.Since(start); d > 200*time.Millisecond+margin {
		t.Fatalf("New took %v", d)
	}
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"foo":                  12182,
		"{user1000}.following": slot("user1000"),
		"a{b}c{d}":             slot("b"),
		"123456789":            0x31C3 % slotCount, // the XMODEM check value
	} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestCloseStopsGoroutines: the tier starts no goroutine of its own, and
// Close stops rueidis's (pipe readers/writers, the abort waiters of reads
// that timed out against a frozen server).
func TestCloseStopsGoroutines(t *testing.T) {
	srv := redistest.Standalone(t)
	before := runtime.NumGoroutine()
	tr, err := New(Options{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		_, _, _ = tr.Get(context.Background(), "ns:k")
	}
	srv.Freeze()
	for i := 0; i < 3; i++ {
		_, _, _ = tr.Get(context.Background(), "ns:k")
	}
	srv.Thaw()
	_ = tr.Close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBreakerUsesClock: the breaker runs on Options.Clock, so its open
// interval passes when the injected clock says so, not after a sleep.
func TestBreakerUsesClock(t *testing.T) {
	srv := redistest.Standalone(t)
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := clockFunc(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Clock: clock})
	srv.Kill()
	for i := 0; i < consecutiveFailures; i++ {
		if _, _, err := tr.Get(context.Background(), "ns:k"); err == nil || errors.Is(err, tier.ErrBypassed) {
			t.Fatalf("Get %d: %v, want a failure", i, err)
		}
	}
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("open breaker: %v", err)
	}
	advance(breaker.DefaultOpenTimeout)
	// Half-open: the read that lets the probe through is bypassed, and the
	// probe, a PING on the tier's own goroutine, reaches the dead server,
	// fails, and reopens the breaker with twice the interval.
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("probe's read: %v, want bypassed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for tr.Stats().BreakerOpens != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the probe did not reopen the breaker: %+v", tr.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	advance(breaker.DefaultOpenTimeout)
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("backed-off breaker: %v", err)
	}
	if st := tr.Stats(); st.BreakerOpens != 2 || st.BreakerState != BreakerOpen || st.Bypassed != 3 {
		t.Fatalf("stats = %+v", st)
	}
}

// TestFrozenServerOpensBreakerAtOnce: the first read that times out on a
// frozen server, with no call answered for its whole budget, opens the
// breaker (SilentFailures 1) once the two PINGs that follow it are not
// answered either; reads meanwhile are bypassed at once, and so are the
// reads after, instead of waiting a budget each; ConsecutiveFailures
// would have held four more.
func TestFrozenServerOpensBreakerAtOnce(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	for i := 0; i < 100; i++ { // open every pooled connection first
		_, _, _ = tr.Get(context.Background(), "ns:k") // a busy host may time one out
	}
	before := tr.Stats()
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	start := time.Now()
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first read of the frozen server: %v, want a timeout", err)
	}
	// While the PINGs are out, a read is bypassed at once rather than
	// wait a budget of its own.
	second := time.Now()
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("read while the timeout is judged: %v, want bypassed", err)
	}
	if d := time.Since(second); d > margin {
		t.Fatalf("read while the timeout is judged took %v", d)
	}
	// A budget and two PINGs.
	for tr.Stats().BreakerState != BreakerOpen {
		if time.Since(start) > DefaultReadBudget+2*silentConfirm+2*margin {
			t.Fatalf("breaker not open %v after the freeze: %+v", time.Since(start), tr.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("breaker open %v after the freeze", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, _, err := tr.Get(context.Background(), "ns:k"); !errors.Is(err, tier.ErrBypassed) {
		t.Fatalf("read after the confirmation: %v, want bypassed", err)
	}
	if d := time.Since(start); d > margin {
		t.Fatalf("bypassed read took %v", d)
	}
	if st := tr.Stats(); st.BreakerOpens != 1 || st.Timeouts != before.Timeouts+1 || st.BreakerState != BreakerOpen {
		t.Fatalf("stats = %+v, want the breaker opened by the one timeout", st)
	}
}

// TestLateServerKeepsBreakerClosed: a server that does not run for 100 ms
// at a time (SIGSTOP, then SIGCONT), as a saturated host's scheduler may
// leave it, times reads out but answers the PING that follows: the
// timeouts are late answers, not silence, and the breaker stays closed;
// the reads sent while the PING was out were bypassed.
// A round whose stop this process, itself late, ended only after 150 ms
// proves nothing and is not counted.
func TestLateServerKeepsBreakerClosed(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	for i := 0; i < 100; i++ { // open every pooled connection first
		_, _, _ = tr.Get(context.Background(), "ns:k") // a busy host may time one out
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			_, _, _ = tr.Get(context.Background(), "ns:k")
		}
	})
	defer wg.Wait()
	defer close(stop)
	counted, timeouts, bypassed := 0, uint64(0), uint64(0)
	for round := 0; round < 20 && counted < 5; round++ {
		before := tr.Stats()
		start := time.Now()
		srv.Freeze()
		time.Sleep(100 * time.Millisecond)
		srv.Thaw()
		stopped := time.Since(start)
		time.Sleep(400 * time.Millisecond) // past the PING's verdict
		after := tr.Stats()
		if stopped > 150*time.Millisecond {
			t.Logf("round %d: stopped for %v: not counted", round, stopped)
			continue
		}
		counted++
		timeouts += after.Timeouts - before.Timeouts
		bypassed += after.Bypassed - before.Bypassed
		if after.BreakerOpens != before.BreakerOpens {
			t.Fatalf("round %d: the server stopped for %v opened the breaker: %+v", round, stopped, after)
		}
	}
	t.Logf("%d rounds counted, %d timeouts and %d reads bypassed in them; stats %+v", counted, timeouts, bypassed, tr.Stats())
	if counted == 0 || timeouts == 0 {
		t.Fatalf("%d rounds counted, %d timeouts in them: the server was never seen late", counted, timeouts)
	}
	// The reads sent while a timeout was judged were bypassed, the breaker
	// closed all along.
	if bypassed == 0 {
		t.Fatalf("no read bypassed while %d timeouts were judged", timeouts)
	}
}

// TestFrozenBudgetWithoutBreaker: with the breaker kept closed, reads and
// writes keep going to the frozen server for 2.5 s (reads whenever no
// timeout is being judged, writes always), across rueidis closing the
// silent connections (PingTimeout) and redialling a server that accepts
// and never answers the handshake. The budget alone must bound every read,
// and WriteTimeout every write.
func TestFrozenBudgetWithoutBreaker(t *testing.T) {
	srv := redistest.Standalone(t)
	never := BreakerOptions{ConsecutiveFailures: 1 << 30, SilentFailures: 1 << 30, MinRequests: 1 << 30}
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Breaker: never})
	for i := 0; i < 100; i++ { // open every pooled connection first
		_, _, _ = tr.Get(context.Background(), "ns:k")
	}
	srv.Freeze()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	reads := 0
	stop := time.Now().Add(2500 * time.Millisecond)
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				var err error
				switch g {
				case 0:
					err = tr.Set(context.Background(), tier.Item{Key: "ns:w", Value: []byte("v"), TTL: time.Minute})
				case 1:
					_, err = tr.GetMany(context.Background(), []string{"ns:a", "ns:b"})
				default:
					_, _, err = tr.Get(context.Background(), "ns:k")
				}
				if err == nil {
					t.Error("call succeeded against a frozen server")
				}
				d := time.Since(start)
				if errors.Is(err, tier.ErrBypassed) {
					time.Sleep(time.Millisecond) // a timeout is being judged
				}
				if g == 0 {
					if d > DefaultWriteTimeout+margin {
						t.Errorf("write took %v while frozen", d)
					}
					continue
				}
				mu.Lock()
				reads++
				worst = max(worst, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d reads, slowest %v, stats %+v", reads, worst, tr.Stats())
	if worst > DefaultReadBudget+margin {
		t.Fatalf("slowest read %v, budget %v", worst, DefaultReadBudget)
	}
	// Reads reached the server after each judgement: more timeouts than
	// the first read's and the first writes'.
	if st := tr.Stats(); st.BreakerOpens != 0 || st.Timeouts < 3 {
		t.Fatalf("stats = %+v", st)
	}
	srv.Thaw()
}

// clockFunc is a function as a holdfast.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// The defaults agree: the largest value the Cache caches by default
// (Policy.MaxValueBytes, 1 MiB) is stored in its envelope, tier.HeaderSize
// bytes more, and one byte more is refused.
func TestDefaultStoredBytesTakeTheDefaultValue(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	ctx := context.Background()
	fits := make([]byte, 1<<20+tier.HeaderSize) // holdfast's default Policy.MaxValueBytes, and the header
	if err := tr.Set(ctx, tier.Item{Key: "ns:fits", Value: fits, TTL: time.Minute}); err != nil {
		t.Fatalf("a default-size value in its envelope was refused: %v", err)
	}
	if err := tr.Set(ctx, tier.Item{Key: "ns:over", Value: append(fits, 0), TTL: time.Minute}); !errors.Is(err, holdfast.ErrTooLarge) {
		t.Fatalf("one byte more: err = %v, want ErrTooLarge", err)
	}
}
