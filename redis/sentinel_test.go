package redis

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// The Sentinel shape on real processes: a primary, two replicas and three
// sentinels (redistest.Sentinel), which fail a primary over about three
// seconds after it stops answering. With HOLDFAST_FULL=1 the test of the
// old primary's return also waits, ten seconds or more, for the sentinels
// to make it a replica.

// TestSentinelOptionsValidate: contradictory or incomplete Sentinel options
// are refused with an error that names them, before anything is dialled.
func TestSentinelOptionsValidate(t *testing.T) {
	sentinels := []string{"127.0.0.1:1"}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Sentinel: SentinelOptions{Addrs: sentinels}}, "without Sentinel.MasterName"},
		{Options{Addrs: []string{"127.0.0.1:2"}, Sentinel: SentinelOptions{Addrs: sentinels, MasterName: "m"}}, "both Addrs"},
		{Options{Addrs: []string{"127.0.0.1:2"}, Sentinel: SentinelOptions{MasterName: "m"}}, "without Sentinel.Addrs"},
		{Options{Addrs: []string{"127.0.0.1:2"}, Sentinel: SentinelOptions{Password: "p"}}, "without Sentinel.Addrs"},
		{Options{Sentinel: SentinelOptions{Addrs: []string{"no-port"}, MasterName: "m"}}, `sentinel address "no-port"`},
		{Options{Sentinel: SentinelOptions{Addrs: sentinels, MasterName: "m", RefreshInterval: -1}}, "negative Sentinel.RefreshInterval"},
		{Options{}, "no Addrs (nor Sentinel.Addrs)"},
	} {
		tr, err := New(c.o)
		if err == nil {
			_ = tr.Close()
			t.Errorf("New(%+v) accepted", c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want it to say %q", c.o, err, c.want)
		}
	}
	// Sentinels that do not answer: New fails within its dial timeout.
	start := time.Now()
	_, err := New(Options{DialTimeout: 200 * time.Millisecond, Sentinel: SentinelOptions{Addrs: sentinels, MasterName: "m"}})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("New without sentinels: %v", err)
	}
	if d := time.Since(start); d > 200*time.Millisecond+margin {
		t.Fatalf("New took %v", d)
	}
}

// sentinelRig is one process's Cache over a Tier that finds its primary
// through a Sentinel group, with its hot tier off so that every read asks
// Redis, and keys loaded.
type sentinelRig struct {
	g       *redistest.SentinelGroup[*redistest.Server]
	tr      *Tier
	c       *holdfast.Cache
	ns      *holdfast.Namespace
	keys    []string
	version atomic.Int64 // the source's version of every key
	loader  holdfast.Loader
}

func newSentinelRig(t *testing.T) *sentinelRig {
	t.Helper()
	r := &sentinelRig{g: redistest.Sentinel(t)}
	// A write timeout of 500 ms: what is measured is where writes go, not
	// how a 100 ms bound fares on a busy machine.
	r.tr = newTier(t, Options{Logger: quiet, WriteTimeout: 500 * time.Millisecond,
		Sentinel: SentinelOptions{Addrs: r.g.SentinelAddrs(), MasterName: r.g.MasterName()}})
	if !r.tr.Sentinel() || r.tr.Primary() != r.g.Nodes()[0].Addr() {
		t.Fatalf("tier on %q (sentinel %v), want the group's primary %s", r.tr.Primary(), r.tr.Sentinel(), r.g.Nodes()[0].Addr())
	}
	var err error
	if r.c, err = holdfast.New(holdfast.Options{Shared: r.tr, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.c.Close() })
	if r.ns, err = r.c.Namespace("p", holdfast.Policy{Hot: holdfast.HotPolicy{MaxBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	r.version.Store(1)
	r.loader = func(_ context.Context, key string) ([]byte, error) {
		return fmt.Appendf(nil, "%s=%d", key, r.version.Load()), nil
	}
	ctx := ctxT(t, 30*time.Second)
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		r.keys = append(r.keys, key)
		if _, err := r.ns.Get(ctx, key, r.loader); err != nil {
			t.Fatal(err)
		}
	}
	// The loads' writes to Redis are asynchronous and, past their write
	// timeout on a busy machine, lost: read again until every key is on
	// the primary (a miss loads and writes it again), then wait for both
	// replicas to have everything, so that a failover cannot lose a key.
	primary := rawClient(t, r.g.Nodes()[0].Addr())
	for _, key := range r.keys {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			n, err := primary.Do(ctx, primary.B().Exists().Key("p:"+key).Build()).AsInt64()
			if err == nil && n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached the primary (%v)", key, err)
			}
			_, _ = r.ns.Get(ctx, key, r.loader)
		}
	}
	if n, err := primary.Do(ctx, primary.B().Wait().Numreplicas(2).Timeout(10_000).Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("WAIT: %d replicas (%v), want 2", n, err)
	}
	return r
}

// sentinelLoad reads the rig's keys through the Cache on two goroutines until stop
// is closed, at most 60 s and 200,000 reads. It counts errors and values
// the source never had at the time, and keeps the latencies.
type sentinelLoad struct {
	reads, errs, wrong atomic.Int64
	mu                 sync.Mutex
	lat                []time.Duration
	firstErr           atomic.Value
	wg                 sync.WaitGroup
	stop               chan struct{}
}

func (r *sentinelRig) startLoad() *sentinelLoad {
	l := &sentinelLoad{stop: make(chan struct{})}
	const readers, maxReads = 2, 100_000
	for g := range readers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			end := time.Now().Add(60 * time.Second)
			var lat []time.Duration
			defer func() { l.mu.Lock(); l.lat = append(l.lat, lat...); l.mu.Unlock() }()
			for i := 0; i < maxReads && time.Now().Before(end); i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := r.keys[(i*readers+g)%len(r.keys)]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				res, err := r.ns.Get(ctx, key, r.loader)
				lat = append(lat, time.Since(start))
				cancel()
				l.reads.Add(1)
				switch {
				case err != nil:
					l.errs.Add(1)
					l.firstErr.CompareAndSwap(nil, err)
				case !strings.HasPrefix(string(res.Value), key+"="):
					l.wrong.Add(1)
				}
				time.Sleep(500 * time.Microsecond)
			}
		}()
	}
	return l
}

// end stops the load and checks it: reads made, no error, no wrong value.
// It returns the p99 and the worst latency.
func (l *sentinelLoad) end(t *testing.T) (p99, worst time.Duration) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if l.reads.Load() < 100 {
		t.Fatalf("only %d reads", l.reads.Load())
	}
	if n := l.errs.Load(); n != 0 {
		t.Errorf("%d of %d reads failed, the first: %v", n, l.reads.Load(), l.firstErr.Load())
	}
	if n := l.wrong.Load(); n != 0 {
		t.Errorf("%d reads returned another key's value", n)
	}
	slices.Sort(l.lat)
	return l.lat[len(l.lat)*99/100], l.lat[len(l.lat)-1]
}

// sentinelWrites sets a key of its own through the tier every 5 ms until
// stop is closed (at most 60 s), and records when each was acknowledged.
type sentinelWrites struct {
	mu     sync.Mutex
	oks    []ackedWrite
	errs   int
	failed []time.Time
	wg     sync.WaitGroup
	stop   chan struct{}
}

type ackedWrite struct {
	key string
	at  time.Time
}

func (r *sentinelRig) startWrites() *sentinelWrites {
	w := &sentinelWrites{stop: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for i, end := 0, time.Now().Add(60*time.Second); time.Now().Before(end); i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			key := fmt.Sprintf("w:%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := r.tr.Set(ctx, tier.Item{Key: key, Value: []byte("x"), TTL: 5 * time.Minute})
			cancel()
			w.mu.Lock()
			if err == nil {
				w.oks = append(w.oks, ackedWrite{key, time.Now()})
			} else {
				w.errs++
				w.failed = append(w.failed, time.Now())
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *sentinelWrites) end() {
	close(w.stop)
	w.wg.Wait()
}

// checkLanded stops the writes and checks where they went: every write
// acknowledged more than a second after the sentinels' switch is on the
// new primary p, and there is at least one. It reports the last
// acknowledged write that is not on p (one the old primary took and lost)
// relative to the switch.
func (w *sentinelWrites) checkLanded(t *testing.T, p *redistest.Server, switched time.Time) {
	t.Helper()
	time.Sleep(time.Until(switched.Add(1500 * time.Millisecond)))
	w.end()
	raw := rawClient(t, p.Addr())
	ctx := ctxT(t, 10*time.Second)
	var lost, after int
	var lastLost time.Time
	for _, a := range w.oks {
		n, err := raw.Do(ctx, raw.B().Exists().Key(a.key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			lost++
			lastLost = a.at
		}
		if a.at.After(switched.Add(time.Second)) {
			after++
			if n == 0 {
				t.Errorf("write %s acknowledged %v after the switch is not on the new primary", a.key, a.at.Sub(switched))
			}
		}
	}
	if after == 0 {
		t.Error("no write acknowledged more than 1 s after the switch")
	}
	// A write past its timeout on a busy machine is possible any time: a
	// few are logged, a share of them is a failure.
	var late int
	for _, f := range w.failed {
		if f.After(switched.Add(time.Second)) {
			late++
		}
	}
	if late > 0 {
		t.Logf("%d writes failed more than 1 s after the switch, of %d tried", late, late+after)
	}
	if late*20 > late+after {
		t.Errorf("%d of %d writes failed more than 1 s after the switch", late, late+after)
	}
	last := "none"
	if lost > 0 {
		last = fmt.Sprintf("the last %v after the switch", lastLost.Sub(switched).Round(time.Millisecond))
	}
	t.Logf("%d writes acknowledged, %d failed; %d acknowledged but not on the new primary (%s)", len(w.oks), w.errs, lost, last)
}

// failedOver waits for a sentinel to name a primary other than old, checks
// that the tier follows within a second, and returns the new primary and
// when the sentinels named it.
func (r *sentinelRig) failedOver(t *testing.T, ctx context.Context, fault time.Time, old *redistest.Server) (*redistest.Server, time.Time) {
	t.Helper()
	p, err := r.g.FirstNewPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now() // at most one poll (10 ms and a redis-cli) late
	for deadline := switched.Add(time.Second); r.tr.Primary() != p.Addr() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	followed := time.Now()
	t.Logf("a sentinel named %s %v after the fault; the tier followed %v later",
		p.Addr(), switched.Sub(fault).Round(time.Millisecond), followed.Sub(switched).Round(time.Millisecond))
	if got := r.tr.Primary(); got != p.Addr() {
		t.Errorf("tier on %s a second after a sentinel named %s", got, p.Addr())
	}
	if st := r.tr.Stats(); st.PrimaryMoves != 1 || st.BreakerState != BreakerClosed {
		t.Errorf("after one failover: %d moves, breaker %v", st.PrimaryMoves, st.BreakerState)
	}
	return p, switched
}

// invalidateDuring invalidates one key while the failover is under way,
// with the source moved on, and returns the key: the Invalidate must not
// be lost.
func (r *sentinelRig) invalidateDuring(t *testing.T, ctx context.Context) string {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // into the failover
	key := r.keys[0]
	r.version.Store(2)
	if err := r.ns.Invalidate(ctx, key); err != nil {
		t.Fatalf("Invalidate during the failover: %v", err)
	}
	return key
}

// invalidationHeld checks that the invalidation made during the failover
// reached the new primary (a replay of the queued delete) and that this
// process reads the new value.
func (r *sentinelRig) invalidationHeld(t *testing.T, ctx context.Context, p *redistest.Server, key string) {
	t.Helper()
	var held string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if held = storedValue(t, p, "p:"+key); held != key+"=1" {
			break
		}
	}
	if held == key+"=1" {
		t.Errorf("the new primary still holds %q 5 s after the failover: the invalidation made during it was lost", held)
	}
	res, err := r.ns.Get(ctx, key, r.loader)
	if err != nil || string(res.Value) != key+"=2" {
		t.Errorf("after the failover this process read %q (%v), want %s=2", res.Value, err, key)
	}
}

// sentinelRun is one failover under load: the rig's reads and writes, the
// new primary and when a sentinel named it.
type sentinelRun struct {
	r        *sentinelRig
	l        *sentinelLoad
	w        *sentinelWrites
	old, p   *redistest.Server
	switched time.Time
	// again is set when the sentinels failed over a second time, from
	// the new primary to another replica: with down-after at 1 s, a
	// machine saturated under -race can keep a just-promoted primary from
	// answering their PINGs for that long.
	again bool
}

// underFailover starts the load and writes, runs steady (what the test
// checks before the failover, nil for nothing), makes the fault, which
// must fail the primary over, invalidates a key meanwhile and waits for
// the tier to follow, checking that the invalidation held.
func (r *sentinelRig) underFailover(t *testing.T, ctx context.Context, steady func(), fault func(old *redistest.Server)) *sentinelRun {
	t.Helper()
	run := &sentinelRun{r: r, old: r.g.Nodes()[0], l: r.startLoad(), w: r.startWrites()}
	time.Sleep(300 * time.Millisecond)
	if steady != nil {
		steady()
	}
	at := time.Now()
	fault(run.old)
	key := r.invalidateDuring(t, ctx)
	run.p, run.switched = r.failedOver(t, ctx, at, run.old)
	r.invalidationHeld(t, ctx, run.p, key)
	return run
}

// end checks where the writes went and what the reads got.
//
// After a second failover the writes acknowledged by the first new
// primary may be lost with it, as Sentinel loses them for any client, so
// where they went is not checked; the tier must be on the last primary
// and never back on the first one.
func (run *sentinelRun) end(t *testing.T) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	last, err := run.r.g.WaitPrimary(ctx, run.old)
	if err != nil {
		t.Fatal(err)
	}
	if last != run.p {
		run.again = true
		t.Logf("the sentinels failed over again, from %s to %s: the machine is too busy for down-after 1 s; where writes went is not checked", run.p.Addr(), last.Addr())
		for deadline := time.Now().Add(2 * time.Second); run.r.tr.Primary() != last.Addr() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if got := run.r.tr.Primary(); got != last.Addr() {
			t.Errorf("tier on %s, the sentinels name %s", got, last.Addr())
		}
		run.w.end()
	} else {
		run.w.checkLanded(t, run.p, run.switched)
	}
	p99, worst := run.l.end(t)
	t.Logf("%d reads, p99 %v, worst %v", run.l.reads.Load(), p99, worst)
}

// TestSentinelPrimaryKilled: the primary SIGKILLed under load. Reads keep
// answering (from memory while needed) with no error, writes reach the
// new primary within a second of the sentinels' switch, an Invalidate made
// meanwhile is not lost, and the old primary, back (restarted empty) as a
// master until the sentinels make it a replica, is not written to.
func TestSentinelPrimaryKilled(t *testing.T) {
	r := newSentinelRig(t)
	ctx := ctxT(t, 2*time.Minute)
	run := r.underFailover(t, ctx, nil, func(old *redistest.Server) { old.Kill() })

	// The old primary returns, empty, calling itself a master. Asked
	// meanwhile, the sentinels' naming of the highest epoch is the new
	// primary, whatever one of them that has not yet heard of the
	// failover says.
	run.old.Restart()
	back := time.Now()
	for time.Since(back) < 1500*time.Millisecond {
		pc, _, err := r.tr.sentinel.resolve(ctx, "")
		if err != nil {
			// The sentinels named the old primary, under no newer epoch
			// than the tier left it at: refused.
			t.Logf("resolve after the old primary's return: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		pc.client.Close()
		if pc.addr == run.old.Addr() {
			t.Fatalf("the sentinels resolve to the old primary %s after its return", pc.addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fullRun() {
		if err := r.g.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("the old primary a replica %v after its return", time.Since(back).Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
	}
	run.end(t)
	// Until the sentinels convert it, every write it runs is one of the
	// tier's; after, its primary's too (HOLDFAST_FULL=1), and then the
	// writes checked on the new primary say where they went.
	if n := commandCalls(t, run.old, "set") + commandCalls(t, run.old, "evalsha") + commandCalls(t, run.old, "eval"); n != 0 && !fullRun() {
		t.Errorf("the old primary, back, ran %d writes", n)
	}
	if got := r.tr.Primary(); got == run.old.Addr() {
		t.Errorf("tier back on the old primary %s after its return", got)
	}
	if st := r.tr.Stats(); st.PrimaryMoves != 1 && !run.again {
		t.Errorf("%d primary moves, want 1", st.PrimaryMoves)
	}
}

// TestSentinelPrimaryFrozen: the primary SIGSTOPped under load: the same
// as killed, though every call to it hangs instead of failing.
func TestSentinelPrimaryFrozen(t *testing.T) {
	r := newSentinelRig(t)
	run := r.underFailover(t, ctxT(t, 2*time.Minute), nil, func(old *redistest.Server) { old.Freeze() })
	run.end(t)
	run.old.Thaw()
}

// TestSentinelLostAndManualFailover: a sentinel killed changes nothing (no
// move, no breaker opening, no failed write); then a SENTINEL FAILOVER to
// a replica, which the tier follows as it does a failure.
func TestSentinelLostAndManualFailover(t *testing.T) {
	r := newSentinelRig(t)
	ctx := ctxT(t, 2*time.Minute)
	run := r.underFailover(t, ctx, func() {
		r.g.Sentinels()[0].Kill()
		time.Sleep(1500 * time.Millisecond)
		// A read past its 50 ms budget, or a write past its timeout, on a
		// busy machine is possible any time (the Cache answers the read
		// from memory): they are logged, not failed.
		st := r.tr.Stats()
		if st.PrimaryMoves != 0 || st.BreakerOpens != 0 {
			t.Errorf("a lost sentinel changed something: %+v", st)
		}
		t.Logf("with a sentinel lost: %d reads of Redis, %d failed; %d writes, %d failed", st.Gets, st.Errors, st.Sets, st.SetErrors)
		if r.tr.Primary() != r.g.Nodes()[0].Addr() {
			t.Errorf("tier moved to %s on a lost sentinel", r.tr.Primary())
		}
	}, func(*redistest.Server) {
		if err := r.g.Failover(ctx); err != nil {
			t.Fatal(err)
		}
	})
	run.end(t)
}

// TestSentinelReadOnlyPrimary: the sentinels are made to name another
// primary without announcing it (SENTINEL REMOVE and MONITOR, after the
// nodes swapped roles by hand), so only what the old primary answers
// tells: a tier that writes meets READONLY and moves at once, though its
// periodic check is an hour away; a tier that only reads finds the old
// primary reporting itself a replica at its periodic check.
//
// The sentinels require a password of their own: the tiers give it, and a
// tier with a wrong one is refused with an error that says so.
func TestSentinelReadOnlyPrimary(t *testing.T) {
	const password = "sentinels-own"
	g := redistest.Sentinel(t, redistest.SentinelConfig{SentinelPassword: password})
	ctx := ctxT(t, time.Minute)
	old, next := g.Nodes()[0], g.Nodes()[1]
	opts := func(refresh time.Duration) Options {
		return Options{Logger: quiet, Sentinel: SentinelOptions{Addrs: g.SentinelAddrs(), MasterName: g.MasterName(),
			Password: password, RefreshInterval: refresh}}
	}
	before := runtime.NumGoroutine()
	wrong := opts(0)
	wrong.Sentinel.Password = "not-" + password
	if tr, err := New(wrong); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		if tr != nil {
			tr.Close()
		}
		t.Fatalf("New with the sentinels' password wrong: %v, want an authentication failure", err)
	}
	writer, reader := newTier(t, opts(time.Hour)), newTier(t, opts(200*time.Millisecond))
	if writer.Primary() != old.Addr() || reader.Primary() != old.Addr() {
		t.Fatalf("tiers on %s and %s, want %s", writer.Primary(), reader.Primary(), old.Addr())
	}
	cli := func(s *redistest.Server, args ...string) {
		t.Helper()
		if _, err := s.CLI(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	cli(next, "REPLICAOF", "NO", "ONE")
	cli(old, "REPLICAOF", "127.0.0.1", fmt.Sprint(next.Port()))
	for _, s := range g.Sentinels() {
		cli(s, "SENTINEL", "REMOVE", g.MasterName())
		cli(s, "SENTINEL", "MONITOR", g.MasterName(), "127.0.0.1", fmt.Sprint(next.Port()), "2")
	}
	start := time.Now()
	var readOnly int
	for deadline := start.Add(5 * time.Second); writer.Primary() != next.Addr() && time.Now().Before(deadline); {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := writer.Set(wctx, tier.Item{Key: "k", Value: []byte("v"), TTL: time.Minute}); err != nil && strings.Contains(err.Error(), "READONLY") {
			readOnly++
		}
		cancel()
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the writer moved %v after the switch, after %d READONLY replies", time.Since(start).Round(time.Millisecond), readOnly)
	if writer.Primary() != next.Addr() {
		t.Fatalf("writer still on %s", writer.Primary())
	}
	if readOnly == 0 {
		t.Error("the writer met no READONLY: the test did not reproduce a demoted primary")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the writer took %v to move on READONLY", d)
	}
	for deadline := start.Add(5 * time.Second); reader.Primary() != next.Addr() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the reader moved %v after the switch", time.Since(start).Round(time.Millisecond))
	if reader.Primary() != next.Addr() {
		t.Fatalf("reader still on %s", reader.Primary())
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := writer.Set(wctx, tier.Item{Key: "k2", Value: []byte("v"), TTL: time.Minute}); err != nil {
		t.Fatalf("write after the move: %v", err)
	}
	if storedRaw(t, next, "k2") != "v" {
		t.Error("the write after the move is not on the new primary")
	}

	// Every goroutine of the tiers, their sentinel subscriptions and
	// resolvers included, and of the clients of the primaries they left,
	// ends with Close.
	writer.Close()
	reader.Close()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
}
