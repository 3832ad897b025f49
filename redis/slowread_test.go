package redis_test

// Answering from memory while Redis is frozen (holdfast.Policy.SlowReadGrace),
// and the half-open probe that never holds a reader, against a real
// redis-server stopped with SIGSTOP.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/holdfast-dev/holdfast/tier"
)

// slowReadBudget is the read budget of these tests: long, so that a read
// that waits for the frozen server (two seconds) and one answered from
// memory (milliseconds) are far apart on any machine.
const slowReadBudget = 2 * time.Second

// healthyGrace is the slow-read delay of these tests: the default 2 ms is
// within the pauses a goroutine sees on a busy 2-core box under the race
// detector, so a healthy read could be answered from memory here; the
// lab's no-fault runs measure the default.
const healthyGrace = 20 * time.Millisecond

// fast is what a read that must not wait for Redis may take on a noisy
// 2-core box under the race detector: a quarter of the budget.
const fast = slowReadBudget / 4

func TestSlowReadFrozenRedis(t *testing.T) {
	rp := newReadPath(t, redis.Options{ReadBudget: slowReadBudget, Breaker: quickBreaker}, holdfast.Options{},
		holdfast.Policy{TTL: time.Minute, SlowReadGrace: healthyGrace, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rp.srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(raw.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thawed := true
	t.Cleanup(func() {
		if !thawed {
			rp.srv.Thaw()
		}
	})
	freeze := func() { rp.srv.Freeze(); thawed = false }
	thaw := func() { rp.srv.Thaw(); thawed = true }
	timedGet := func(key string) (holdfast.Result, time.Duration) {
		t.Helper()
		start := time.Now()
		res, err := rp.ns.Get(ctx, key, (&countingLoader{}).Load)
		if err != nil {
			t.Fatalf("Get %q: %v", key, err)
		}
		return res, time.Since(start)
	}

	l := &countingLoader{}
	keys := []string{"a", "k0", "k1", "k2", "k3", "k4", "k5"}
	for _, k := range keys {
		rp.get(t, k, l.Load, time.Second)
		waitFlight(t, rp, k)
	}

	// Healthy: every read is Redis's.
	for i := range 300 {
		if res := rp.get(t, keys[i%len(keys)], l.Load, time.Second); res.Source != holdfast.SourceShared {
			t.Fatalf("healthy read %d: from %v", i, res.Source)
		}
	}
	if st := rp.ns.Stats(); st.Get("memory_on_slow_read") != 0 {
		t.Fatalf("healthy Redis: %d reads answered from memory, want 0", st.Get("memory_on_slow_read"))
	}

	// Another process stores a newer "a". Frozen, a read of "a" is
	// answered from memory at once; its read goes on, and once Redis
	// thaws its answer reaches last-known-good.
	now := time.Now()
	newer := tier.AppendEntry(nil, tier.Entry{Value: []byte("newer-a"), Origin: now, Soft: now.Add(time.Minute), Hard: now.Add(time.Minute)})
	if err := raw.Do(ctx, raw.B().Set().Key("product:a").Value(rueidis.BinaryString(newer)).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	// The first read after the freeze runs on its reader's goroutine (the
	// tier looked healthy) and waits; once the tier has answered nothing
	// for the slow-read delay, a read of "a" is answered from memory at
	// once. Its read goes on, and once Redis thaws its answer reaches
	// last-known-good.
	type timed struct {
		res holdfast.Result
		d   time.Duration
	}
	firstRead := func(key string) <-chan timed {
		ch := make(chan timed, 1)
		go func() {
			res, d := timedGet(key)
			ch <- timed{res, d}
		}()
		eventually(t, 5*time.Second, func() bool { return testhook.Loading(rp.ns, key) })
		time.Sleep(5 * healthyGrace)
		return ch
	}
	freeze()
	cold := firstRead("cold")
	res, d := timedGet("a")
	if !fromMemoryFor(res, holdfast.ReasonTierSlow) || string(res.Value) != "value-of-a" || d > fast {
		t.Fatalf("frozen: %q from %v after %v; want value-of-a from memory within %v", res.Value, res.Source, d, fast)
	}
	t.Logf("frozen, a value in memory: answered after %v", d)
	thawedAt := time.Now()
	thaw()
	if c := <-cold; c.res.Source != holdfast.SourceLoaded || time.Since(thawedAt) > c.d {
		t.Fatalf("first read, nothing in memory: from %v after %v; want the loader's answer once Redis thawed", c.res.Source, c.d)
	}
	waitFlight(t, rp, "a")
	// The cold read's timeout opened the breaker; reads drive its probes
	// until it closes, so that the next freeze meets a tier that looks
	// healthy again.
	eventually(t, 10*time.Second, func() bool {
		timedGet("a")
		return rp.tier.Stats().BreakerState == redis.BreakerClosed
	})
	waitFlight(t, rp, "a")

	freeze()
	cold = firstRead("cold2")
	if res, d := timedGet("a"); !fromMemoryFor(res, holdfast.ReasonTierSlow) || string(res.Value) != "newer-a" || d > fast {
		t.Fatalf("frozen again: %q from %v after %v; want the thawed read's newer-a from memory", res.Value, res.Source, d)
	}
	// A read with nothing in memory, sent once Redis has answered none of
	// the reads waiting on it for four slow-read delays, skips it and
	// loads at once: the breaker cannot open before the first read's
	// budget is out, and meanwhile each such read would wait its own.
	time.Sleep(5 * healthyGrace)
	if res, d := timedGet("cold3"); res.Source != holdfast.SourceLoaded || d > fast {
		t.Fatalf("frozen, breaker %v, nothing in memory: from %v after %v; want a load within %v", rp.tier.Stats().BreakerState, res.Source, d, fast)
	}
	// The first read, sent before the freeze was seen, waits for Redis.
	if c := <-cold; c.res.Source != holdfast.SourceLoaded || c.d < slowReadBudget*9/10 {
		t.Fatalf("frozen, nothing in memory: from %v after %v; want a load after the %v budget", c.res.Source, c.d, slowReadBudget)
	}

	// The cold read's timeout, with nothing answered for its whole
	// budget, opened the breaker (SilentFailures); every read is answered
	// from memory at once: from last-known-good past the open breaker, or
	// after the slow-read delay where a read still went to Redis.
	eventually(t, 5*time.Second, func() bool { return rp.tier.Stats().BreakerState == redis.BreakerOpen })
	for _, k := range keys[1:] {
		if res, d := timedGet(k); !fromMemoryFor(res, holdfast.ReasonTierSlow, holdfast.ReasonTierDown) || d > fast {
			t.Fatalf("frozen: %q from %v after %v; want memory within %v", k, res.Source, d, fast)
		}
	}

	// Half-open probes go on while readers never wait: each open interval
	// (200 to 400 ms) ends with a probe; the PING times out after the
	// budget and opens the breaker again.
	opens := rp.tier.Stats().BreakerOpens
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if res, d := timedGet(fmt.Sprintf("probe-%d", i)); d > fast {
			t.Fatalf("frozen, breaker open or half-open: read %d took %v from %v; a probe held it", i, d, res.Source)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ts := rp.tier.Stats(); ts.BreakerOpens <= opens {
		t.Fatalf("no probe reopened the breaker in 3 s: %+v", ts)
	}

	// Thawed, the probes close the breaker and reads are Redis's again.
	thaw()
	eventually(t, 10*time.Second, func() bool {
		res, _ := timedGet("a")
		return res.Source == holdfast.SourceShared && rp.tier.Stats().BreakerState == redis.BreakerClosed
	})
	t.Logf("ns %+v", rp.ns.Stats())
}
