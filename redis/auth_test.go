package redis

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// deniedAuths returns how many AUTH attempts srv refused, from ACL LOG
// (Redis 7.0's INFO has no counter for them): the sum of the counts of its
// entries whose reason is auth.
func deniedAuths(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	out, err := srv.CLI(ctxT(t, 5*time.Second), "--raw", "ACL", "LOG")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(out, "\n")
	total, count := 0, 0
	for i := 0; i+1 < len(f); i++ {
		switch strings.TrimSpace(f[i]) {
		case "count":
			count, _ = strconv.Atoi(strings.TrimSpace(f[i+1]))
		case "reason":
			if strings.TrimSpace(f[i+1]) == "auth" {
				total += count
			}
		}
	}
	return total
}

// TestWrongPasswordNew: New with a wrong password fails at once with an
// error that names authentication, logged once.
func TestWrongPasswordNew(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{Access: aclAccess()})
	logs, logger := newLogBuffer()
	for _, o := range []Options{
		{Username: "holdfast", Password: "wrong"},
		{Password: "wrong"},    // requirepass-style, as the default user
		{Username: "holdfast"}, // no password at all
	} {
		o.Addrs, o.Logger = []string{srv.Addr()}, logger
		start := time.Now()
		tr, err := New(o)
		if err == nil {
			_ = tr.Close()
			t.Fatalf("New as %q with password %q: no error", o.Username, o.Password)
		}
		if !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("New as %q with password %q: %v, want it to name authentication", o.Username, o.Password, err)
		}
		t.Logf("as %q with password %q: %v", o.Username, o.Password, err)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("New took %v to fail", d)
		}
	}
	// Three New calls, three failures: each New logs its own.
	if lines := logs.lines("redis tier: authentication failed"); len(lines) != 3 {
		t.Fatalf("logged %d lines, want one per New: %q", len(lines), lines)
	}
}

// TestWrongPasswordLazy: a Cache over a Lazy tier whose password is wrong
// serves every read from its loader without an error, while Lazy keeps
// retrying in the background; the refusals are logged once, not once per
// attempt nor per read; nothing reaches Redis.
func TestWrongPasswordLazy(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{Access: aclAccess()})
	logs, logger := newLogBuffer()
	lz, err := NewLazy(Options{Addrs: []string{srv.Addr()}, Username: "holdfast", Password: "wrong", KeyPrefix: aclPrefix, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lz.Close() })
	ns := authCache(t, lz)

	loads := 0
	load := func(_ context.Context, key string) ([]byte, error) {
		loads++
		return []byte("v-" + key), nil
	}
	ctx := ctxT(t, 30*time.Second)
	// 300 reads over about 1.5 s: long enough for Lazy to try a few times.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 300; i++ {
		key := "k" + strconv.Itoa(i%10)
		res, err := ns.Get(ctx, key, load)
		if err != nil || string(res.Value) != "v-"+key {
			t.Fatalf("read %d: %q, %v", i, res.Value, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("300 reads took more than 10 s (%d done)", i)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lz.Tier() != nil {
		t.Fatal("Lazy connected with a wrong password")
	}
	n := deniedAuths(t, srv)
	if n < 2 {
		t.Fatalf("the server refused %d AUTH attempts, want several: the test shows less than it says", n)
	}
	t.Logf("the server refused %d AUTH attempts", n)
	if lines := logs.lines("redis tier: authentication failed"); len(lines) != 1 {
		t.Fatalf("logged %d lines, want 1: %q", len(lines), lines)
	}
	if keys, err := srv.CLI(ctx, "DBSIZE"); err != nil || keys != "0" {
		t.Fatalf("DBSIZE = %q, %v; want 0", keys, err)
	}
}

// TestWrongPasswordAfterStart: the tier's password is changed under it and
// its connections are closed, so every reconnect is refused. A Cache over
// it (no hot tier, so every read asks Redis) keeps answering with the right
// values and no error, the refusals are logged once under hundreds of
// reads, and once the password is right again reads come from Redis again,
// with the values the loader gave.
func TestWrongPasswordAfterStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{Access: aclAccess()})
	logs, logger := newLogBuffer()
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Username: "holdfast", Password: aclPassword, KeyPrefix: aclPrefix,
		ReadBudget: time.Second, Logger: logger, Breaker: BreakerOptions{OpenTimeout: 100 * time.Millisecond, MaxOpenTimeout: 200 * time.Millisecond}})
	ns := authCache(t, tr)
	load := func(_ context.Context, key string) ([]byte, error) { return []byte("v-" + key), nil }
	ctx := ctxT(t, 60*time.Second)

	read := func(i int) holdfast.Result {
		t.Helper()
		key := "k" + strconv.Itoa(i%10)
		res, err := ns.Get(ctx, key, load)
		if err != nil || string(res.Value) != "v-"+key {
			t.Fatalf("read %d: %q from %v, %v", i, res.Value, res.Source, err)
		}
		return res
	}
	for i := 0; i < 10; i++ {
		read(i) // loaded and stored in Redis
	}

	cli := func(args ...string) {
		t.Helper()
		if out, err := srv.CLI(ctx, args...); err != nil {
			t.Fatalf("%v: %s, %v", args, out, err)
		}
	}
	cli("ACL", "SETUSER", "holdfast", "resetpass", ">changed")
	cli("CLIENT", "KILL", "USER", "holdfast")
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 300; i++ {
		read(i)
		if time.Now().After(deadline) {
			t.Fatalf("300 reads took more than 20 s (%d done)", i)
		}
		time.Sleep(2 * time.Millisecond)
	}
	n := deniedAuths(t, srv)
	if n < 2 {
		t.Fatalf("the server refused %d AUTH attempts, want several: the test shows less than it says", n)
	}
	t.Logf("the server refused %d AUTH attempts", n)
	if lines := logs.lines("redis tier: authentication failed"); len(lines) != 1 {
		t.Fatalf("logged %d lines, want 1: %q", len(lines), lines)
	}

	// The password is right again: reads are served by Redis once more,
	// with the loader's values (nothing wrong was stored meanwhile).
	cli("ACL", "SETUSER", "holdfast", "resetpass", ">"+aclPassword)
	shared := 0
	for i := 0; i < 2000 && shared < 10; i++ {
		if read(i).Source == holdfast.SourceShared {
			shared++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if shared < 10 {
		t.Fatalf("only %d reads from Redis after the password was restored", shared)
	}
	for i := 0; i < 10; i++ {
		key := aclPrefix + "auth:k" + strconv.Itoa(i)
		if v, err := srv.CLI(ctx, "--raw", "GET", key); err != nil || !strings.HasSuffix(v, "v-k"+strconv.Itoa(i)) {
			t.Errorf("Redis holds %q for %s (%v), want the loader's value", v, key, err)
		}
	}
}

// authCache returns a namespace "auth" of a Cache over shared, without a
// hot tier so that every read goes to the shared tier, and with
// last-known-good.
func authCache(t *testing.T, shared tier.Tier) *holdfast.Namespace {
	t.Helper()
	c, err := holdfast.New(holdfast.Options{Shared: shared, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ns, err := c.Namespace("auth", holdfast.Policy{TTL: time.Minute, StaleIfError: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
