package redis

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// TestCopiesUnderAnotherMapInvalidated, on a real 3 + 3 Cluster: process B
// smears a hot key under a slot map that lags a slot move, so its copies
// have names that process A, whose map is current, would not choose. A
// invalidates the key: afterwards no copy under any name (registered, or
// chosen under either map) holds a value, and reads through B never
// return the old value.
func TestCopiesUnderAnotherMapInvalidated(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{NodeTimeout: 30 * time.Second})
	ctx := ctxT(t, 90*time.Second)
	// Budgets far above any healthy call: this test is about which values
	// survive, not about latency, and a busy machine stalls now and then.
	o := Options{Addrs: cl.Addrs()[:1], KeyPrefix: "cp:", ReadBudget: 2 * time.Second, WriteTimeout: 2 * time.Second,
		Cluster: ClusterOptions{PrimaryAfterWrite: -1}}
	lagging := o
	lagging.Cluster.TopologyInterval = time.Hour // B's map follows the move below only after a MOVED
	b := newTier(t, lagging)
	rc := rawClient(t, cl.Addrs()...)

	key := "ns:hot"
	full := "cp:" + key
	bCopies := b.copiesOf(full, false)
	if len(bCopies) != 2 {
		t.Fatalf("B's copies %v, want 2", bCopies)
	}
	// Move the slot of B's first copy onto the key's own primary: under
	// the new map that suffix no longer names a copy.
	home := serverByAddr(cl, primaryOf(b, full))
	from := serverByAddr(cl, primaryOf(b, bCopies[0]))
	m := startMove(t, ctx, cl, slot(bCopies[0]), from, home)
	primaries := cl.Primaries(ctx)
	for _, p := range append([]*redistest.Server{home, from}, primaries...) {
		m.cli(t, ctx, p, "CLUSTER", "SETSLOT", m.slot, "NODE", m.toID)
	}
	if err := cl.WaitStable(ctx); err != nil {
		t.Fatal(err)
	}
	a := newTier(t, o)
	aCopies := a.copiesOf(full, false)
	if slices.Contains(aCopies, bCopies[0]) || len(a.copiesOf(full, true)) != len(aCopies) {
		t.Fatalf("A's copies %v (both maps %v) include B's %s: the maps agree", aCopies, a.copiesOf(full, true), bCopies[0])
	}
	if got := b.copiesOf(full, false); !slices.Equal(got, bCopies) {
		t.Fatalf("B's map followed the move: copies %v, then %v", bCopies, got)
	}

	// B smears the value it loaded under its own names.
	ver, err := b.Version(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	item := tier.Item{Key: key, Value: []byte("old"), TTL: time.Minute}
	if ok, err := b.SetSmearedIfVersion(ctx, item, ver); err != nil || !ok {
		t.Fatalf("B's smeared write: %v, %v", ok, err)
	}
	for _, k := range bCopies {
		if v, ok := rawGet(t, rc, k); !ok || v != "old" {
			t.Fatalf("B's copy %s: %q %v", k, v, ok)
		}
	}
	// A copy B filled after a miss is registered too: delete one and let
	// B's reads fill it again.
	if err := rc.Do(ctx, rc.B().Del().Key(bCopies[1]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		if v, found, err := b.GetSmeared(ctx, key); err != nil || !found || string(v) != "old" {
			t.Fatalf("B's read before the invalidation: %q %v %v", v, found, err)
		}
		v, ok := rawGet(t, rc, bCopies[1])
		return ok && v == "old"
	})
	registered := rawMembers(t, rc, "{"+full+"}:c")
	t.Logf("B's copies %v, A's %v, registered %v; B stats %+v", bCopies, aCopies, registered, b.Stats())
	for _, k := range bCopies {
		if !slices.Contains(registered, k) {
			t.Fatalf("B's copy %s is not registered: %v", k, registered)
		}
	}

	// A invalidates; no copy under any name survives.
	if err := a.Invalidate(ctx, key); err != nil {
		t.Fatal(err)
	}
	names := append(append(append([]string{full}, registered...), aCopies...), bCopies...)
	names = append(names, a.copiesOf(full, true)...)
	names = append(names, b.copiesOf(full, true)...)
	for _, k := range names {
		if v, ok := rawGet(t, rc, k); ok {
			t.Fatalf("%s still holds %q after A's invalidation", k, v)
		}
	}
	// The registry keeps every name, so that a repeated invalidation
	// finds them again (TestInvalidationRepeatedAfterLostReply). It may
	// hold one more: a fill B started before the invalidation, under the
	// map a MOVED made it read meanwhile; that copy must hold nothing
	// either, and have its version raised as the others.
	left := rawMembers(t, rc, "{"+full+"}:c")
	for _, k := range registered {
		if !slices.Contains(left, k) {
			t.Fatalf("registry after the invalidation: %v, lost %s of %v", left, k, registered)
		}
	}
	names = append(names, left...)
	assertGone(t, rc, full, left)

	// B's reads miss (its copies and the key are gone) and B's load that
	// read the version before the invalidation writes nothing.
	for i := 0; i < 60; i++ {
		v, found, err := b.GetSmeared(ctx, key)
		if err != nil || found {
			t.Fatalf("B's read %d after the invalidation: %q %v %v", i, v, found, err)
		}
	}
	if ok, err := b.SetSmearedIfVersion(ctx, item, ver); err != nil || ok {
		t.Fatalf("B's stale smeared write after the invalidation: stored %v, %v", ok, err)
	}
	for _, k := range names {
		if v, ok := rawGet(t, rc, k); ok {
			t.Fatalf("%s holds %q after a stale write", k, v)
		}
	}
	// A fresh load, at the new version, is smeared and read again.
	fresh := tier.Item{Key: key, Value: []byte("new"), TTL: time.Minute}
	if ok, err := b.SetSmearedIfVersion(ctx, fresh, ver+1); err != nil || !ok {
		t.Fatalf("B's fresh smeared write: %v, %v", ok, err)
	}
	for i := 0; i < 60; i++ {
		if v, found, err := b.GetSmeared(ctx, key); err != nil || !found || string(v) != "new" {
			t.Fatalf("B's read %d of the fresh value: %q %v %v", i, v, found, err)
		}
	}
}

// TestInvalidateWithoutCopiesOneRoundTrip: a key that was never smeared
// costs Invalidate no copy deletes, on a Cluster where the tier smears.
func TestInvalidateWithoutCopiesOneRoundTrip(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 30*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "nc:", WriteTimeout: time.Second})
	var keys []string
	for _, ks := range keysByPrimary(tr, "nc:", 3) {
		keys = append(keys, ks...)
	}
	if err := tr.Invalidate(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.CopyDeletes != 0 || st.DeleteErrors != 0 {
		t.Fatalf("stats %+v: copy deletes for keys never smeared", st)
	}
	evalsBefore := 0
	for _, n := range cl.Nodes() {
		evalsBefore += commandCalls(t, n, "evalsha") + commandCalls(t, n, "eval")
	}
	if err := tr.Invalidate(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	evals := -evalsBefore
	for _, n := range cl.Nodes() {
		evals += commandCalls(t, n, "evalsha") + commandCalls(t, n, "eval")
	}
	if evals != len(keys) {
		t.Fatalf("%d scripts ran for %d keys, want one each: %s", evals, len(keys), strings.Join(keys, " "))
	}
}

// rawMembers is SMEMBERS of set, straight from the cluster.
func rawMembers(t *testing.T, rc rueidis.Client, set string) []string {
	t.Helper()
	m, err := rc.Do(ctxT(t, 5*time.Second), rc.B().Smembers().Key(set).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("SMEMBERS %s: %v", set, err)
	}
	slices.Sort(m)
	return m
}

// TestInvalidationRepeatedAfterLostReply: the invalidation script ran on the
// key's primary but its reply never came back (a timeout, a dropped
// connection), so the copies it would have deleted next were not. The
// invalidation, repeated as the Cache repeats a failed one, still finds
// every copy and deletes it: the script leaves the registry of copies in
// place rather than taking it.
func TestInvalidationRepeatedAfterLostReply(t *testing.T) {
	redistest.Require(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 30*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "lr:", ReadBudget: 2 * time.Second, WriteTimeout: 2 * time.Second})
	rc := rawClient(t, cl.Addrs()...)
	key := "ns:hot"
	full := "lr:" + key
	copies := tr.copiesOf(full, false)
	if len(copies) != 2 {
		t.Fatalf("copies %v, want 2", copies)
	}
	ver, err := tr.Version(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.SetSmearedIfVersion(ctx, tier.Item{Key: key, Value: []byte("old"), TTL: time.Minute}, ver); err != nil || !ok {
		t.Fatalf("smeared write: %v, %v", ok, err)
	}
	// The script alone, as if its reply had been lost on the way back.
	vk, rk := "{"+full+"}:v", "{"+full+"}:c"
	lost := rc.Do(ctx, rc.B().Eval().Script(invalidateScript.body).Numkeys(3).Key(full, vk, rk).Arg("3600000", tr.opts.Stream.Channel, string(appendAnnouncement(nil, key, time.Now(), ""))).Build())
	if err := lost.Error(); err != nil {
		t.Fatalf("the invalidation script: %v", err)
	}
	for _, k := range copies {
		if v, ok := rawGet(t, rc, k); !ok || v != "old" {
			t.Fatalf("copy %s before the repeat: %q %v; the script alone must not reach the copies", k, v, ok)
		}
	}
	if err := tr.Invalidate(ctx, key); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rc, full, copies)
	if st := tr.Stats(); st.CopyDeletes != uint64(len(copies)) {
		t.Fatalf("copy deletes %d, want %d", st.CopyDeletes, len(copies))
	}
}
