package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// scriptCalls runs every script-backed call of the tier on key once and
// fails the test on an error: SetIfVersion, Lease and Release, Invalidate,
// and SetSmearedIfVersion (whose copies are scripts on other primaries in
// a Cluster).
func scriptCalls(t *testing.T, ctx context.Context, tr *Tier, key string) {
	t.Helper()
	ver, err := tr.Version(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("a"), TTL: time.Minute}, ver); err != nil || !ok {
		t.Fatalf("SetIfVersion %s: %v, %v", key, ok, err)
	}
	if ok, err := tr.Lease(ctx, key, "tok", time.Minute); err != nil || !ok {
		t.Fatalf("Lease %s: %v, %v", key, ok, err)
	}
	if err := tr.Release(ctx, key, "tok"); err != nil {
		t.Fatalf("Release %s: %v", key, err)
	}
	if ok, err := tr.Lease(ctx, key, "other", time.Minute); err != nil || !ok {
		t.Fatalf("Lease %s after Release: %v, %v (the release did not run)", key, ok, err)
	}
	if err := tr.Release(ctx, key, "other"); err != nil {
		t.Fatalf("Release %s: %v", key, err)
	}
	if err := tr.Invalidate(ctx, key); err != nil {
		t.Fatalf("Invalidate %s: %v", key, err)
	}
	if _, found, err := tr.Get(ctx, key); err != nil || found {
		t.Fatalf("Get %s after Invalidate: found %v, %v", key, found, err)
	}
	if v, err := tr.Version(ctx, key); err != nil || v != ver+1 {
		t.Fatalf("version of %s after Invalidate: %d, %v; want %d", key, v, err, ver+1)
	}
	if ok, err := tr.SetSmearedIfVersion(ctx, tier.Item{Key: key, Value: []byte("b"), TTL: time.Minute}, ver+1); err != nil || !ok {
		t.Fatalf("SetSmearedIfVersion %s: %v, %v", key, ok, err)
	}
}

// flushScripts runs SCRIPT FLUSH on each server, as a restart or a new
// node would leave them: no script cached.
func flushScripts(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if out, err := s.CLI(ctxT(t, 5*time.Second), "SCRIPT", "FLUSH"); err != nil || out != "OK" {
			t.Fatalf("SCRIPT FLUSH on %s: %q %v", s.Addr(), out, err)
		}
	}
}

// TestScriptsAfterFlushStandalone: on a server that lost its script cache
// the tier's scripts still run (EVALSHA answered NOSCRIPT is sent again as
// EVAL), and the tier never sends SCRIPT LOAD.
func TestScriptsAfterFlushStandalone(t *testing.T) {
	redistest.Require(t)
	srv := redistest.Standalone(t)
	ctx := ctxT(t, 30*time.Second)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, WriteTimeout: time.Second, ReadBudget: time.Second})
	scriptCalls(t, ctx, tr, "ns:a")
	flushScripts(t, srv)
	evals := commandCalls(t, srv, "eval")
	scriptCalls(t, ctx, tr, "ns:b")
	if got := commandCalls(t, srv, "eval") - evals; got == 0 {
		t.Fatal("no EVAL after SCRIPT FLUSH: the scripts did not fall back")
	}
	scriptCalls(t, ctx, tr, "ns:c") // cached again: EVALSHA
	if n := commandCalls(t, srv, "script|load"); n != 0 {
		t.Fatalf("%d SCRIPT LOADs", n)
	}
	if st := tr.Stats(); st.SetErrors != 0 || st.DeleteErrors != 0 || st.BreakerState != BreakerClosed {
		t.Fatalf("stats %+v", st)
	}
}

// TestScriptsAfterFlushCluster: the same on a 3 + 3 Cluster, with keys on
// every primary and copies of smeared keys on the others.
func TestScriptsAfterFlushCluster(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 60*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "sf:", WriteTimeout: time.Second, ReadBudget: time.Second})
	var keys []string
	for _, ks := range keysByPrimary(tr, "sf:", 2) {
		keys = append(keys, ks...)
	}
	scriptCalls(t, ctx, tr, keys[0])
	flushScripts(t, cl.Nodes()...)
	for _, k := range keys[1:] {
		scriptCalls(t, ctx, tr, k)
	}
	for _, n := range cl.Nodes() {
		if c := commandCalls(t, n, "script|load"); c != 0 {
			t.Fatalf("%s ran %d SCRIPT LOADs", n.Addr(), c)
		}
	}
	if st := tr.Stats(); st.SetErrors != 0 || st.DeleteErrors != 0 || st.BreakerState != BreakerClosed || st.CopyWrites == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// slotMove is a hash slot being moved between two primaries by hand, as
// redis-cli --cluster reshard does it, so that a test can stop half way.
type slotMove struct {
	cl       *redistest.RedisCluster
	slot     string
	from, to *redistest.Server
	toID     string
}

// startMove marks slot MIGRATING on from and IMPORTING on to.
func startMove(t *testing.T, ctx context.Context, cl *redistest.RedisCluster, sl uint16, from, to *redistest.Server) *slotMove {
	t.Helper()
	fromID, err := from.NodeID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	toID, err := to.NodeID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := &slotMove{cl: cl, slot: strconv.Itoa(int(sl)), from: from, to: to, toID: toID}
	m.cli(t, ctx, to, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", fromID)
	m.cli(t, ctx, from, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", toID)
	return m
}

func (m *slotMove) cli(t *testing.T, ctx context.Context, s *redistest.Server, args ...string) {
	t.Helper()
	if out, err := s.CLI(ctx, args...); err != nil || (out != "OK" && out != "NOKEY") {
		t.Fatalf("%s on %s: %q %v", strings.Join(args, " "), s.Addr(), out, err)
	}
}

// migrate moves keys of the slot to the target with MIGRATE.
func (m *slotMove) migrate(t *testing.T, ctx context.Context, keys ...string) {
	t.Helper()
	m.cli(t, ctx, m.from, append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(m.to.Port()), "", "0", "5000", "KEYS"}, keys...)...)
}

// tryAgains is how many TRYAGAIN replies srv has sent (INFO errorstats).
func tryAgains(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	info, err := srv.Info(ctxT(t, 5*time.Second), "errorstats")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(info["errorstat_TRYAGAIN"], "count="))
	return n
}

// TestScriptTryAgainDuringMigration: a script over a key and its version
// key, whose slot is half migrated (the version key moved, the key not),
// is answered TRYAGAIN. The tier retries it with a backoff: bounded by
// the call's deadline while the migration stands still, and successful
// once the migration finishes within it. TRYAGAIN says the node is
// healthy, so neither the node nor the tier's breaker counts it.
func TestScriptTryAgainDuringMigration(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 30 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	const write = 400 * time.Millisecond
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "ta:", WriteTimeout: write,
		Cluster: ClusterOptions{PrimaryAfterWrite: -1}})
	key := "ns:moving"
	full := "ta:" + key
	if err := tr.Set(ctx, tier.Item{Key: key, Value: []byte("v"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Invalidate(ctx, key); err != nil { // creates the version key
		t.Fatal(err)
	}
	if err := tr.Set(ctx, tier.Item{Key: key, Value: []byte("v"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ver, err := tr.Version(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	from := serverByAddr(cl, primaryOf(tr, full))
	var to *redistest.Server
	primaries := cl.Primaries(ctx)
	for _, p := range primaries {
		if p != from {
			to = p
			break
		}
	}
	m := startMove(t, ctx, cl, slot(full), from, to)
	m.migrate(t, ctx, "{"+full+"}:v")

	// The migration stands still: the call retries until its deadline and
	// fails with TRYAGAIN, a few retries and no more.
	before := tryAgains(t, from)
	start := time.Now()
	err = tr.Invalidate(ctx, key)
	took := time.Since(start)
	retries := tryAgains(t, from) - before
	t.Logf("half migrated: %v after %v, %d TRYAGAIN replies", err, took, retries)
	if err == nil || !strings.Contains(err.Error(), "TRYAGAIN") {
		t.Fatalf("Invalidate during a stalled migration: %v, want TRYAGAIN", err)
	}
	// 5, 10, 20, 40, 80 and 160 ms of backoff fit in 400 ms, 320 more do
	// not: the first try and 6 retries at most, and at least 3 replies even
	// on a slow machine.
	if retries < 3 || retries > 7 {
		t.Fatalf("%d TRYAGAIN replies, want 3 to 7 (retries within the %v deadline)", retries, write)
	}
	if took > write+margin {
		t.Fatalf("Invalidate took %v, past its %v deadline", took, write)
	}

	// The migration finishes while a call with a longer deadline retries:
	// it succeeds.
	patient := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "ta:", WriteTimeout: 10 * time.Second,
		Cluster: ClusterOptions{PrimaryAfterWrite: -1}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		// t.Fatal must not run here; errors show up as a failed call.
		if _, err := from.CLI(ctx, "MIGRATE", "127.0.0.1", strconv.Itoa(to.Port()), "", "0", "5000", "KEYS", full); err != nil {
			t.Errorf("MIGRATE %s: %v", full, err)
			return
		}
		for _, p := range append([]*redistest.Server{to, from}, primaries...) {
			if _, err := p.CLI(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID); err != nil {
				t.Errorf("SETSLOT NODE on %s: %v", p.Addr(), err)
			}
		}
	}()
	before = tryAgains(t, from)
	start = time.Now()
	if err := patient.Invalidate(ctx, key); err != nil {
		t.Fatalf("Invalidate across the end of the migration: %v", err)
	}
	took = time.Since(start)
	<-done
	retries = tryAgains(t, from) - before
	got, err := patient.Version(ctx, key)
	t.Logf("migration finished during the call: it succeeded after %v and %d TRYAGAIN replies; version %d -> %d (%v)", took, retries, ver, got, err)
	if retries == 0 || err != nil || got != ver+1 {
		t.Fatalf("%d TRYAGAIN replies, version %d -> %d (%v): want retries and one bump", retries, ver, got, err)
	}
	if v, found, err := patient.Get(ctx, key); err != nil || found {
		t.Fatalf("key after the invalidation: %q %v %v", v, found, err)
	}
	st := tr.Stats()
	if st.BreakerState != BreakerClosed || st.BreakerTransitions != 0 {
		t.Fatalf("a TRYAGAIN moved the tier's breaker: %+v", st)
	}
	if ns := nodeStat(tr, from.Addr()); ns.Failures != 0 || ns.State == NodeEjected {
		t.Fatalf("TRYAGAIN counted against the node: %+v", ns)
	}
}
