package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// GetVersioned answers as Get does, and with the version Version reads
// whenever it says Versioned; a miss, the read that loads, always has it
// from a healthy server.
func TestGetVersioned(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			addrs := serverAddrs(t, mode)
			tr := newTier(t, Options{Addrs: addrs})
			ctx := ctxT(t, 20*time.Second)
			for i := range 20 { // keys over many slots
				key := fmt.Sprint("product:", i)
				l := tr.GetVersioned(ctx, key)
				if l.Err != nil || l.Found || !l.Versioned || l.Version != 0 {
					t.Fatalf("%s, never written: %+v; want a miss at version 0", key, l)
				}
				if err := tr.Invalidate(ctx, key); err != nil {
					t.Fatal(err)
				}
				l = tr.GetVersioned(ctx, key)
				if l.Err != nil || l.Found || !l.Versioned || l.Version != 1 {
					t.Fatalf("%s, invalidated once: %+v; want a miss at version 1", key, l)
				}
				if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("v"), TTL: time.Minute}, 1); !ok || err != nil {
					t.Fatalf("%s: SetIfVersion at 1: %v, %v", key, ok, err)
				}
				l = tr.GetVersioned(ctx, key)
				if l.Err != nil || !l.Found || string(l.Value) != "v" || (l.Versioned && l.Version != 1) {
					t.Fatalf("%s, written at version 1: %+v; want the value", key, l)
				}
				v, found, err := tr.Get(ctx, key)
				if err != nil || !found || string(v) != "v" {
					t.Fatalf("%s: Get %q, %v, %v after GetVersioned's hit", key, v, found, err)
				}
			}
		})
	}
}

// A Cache's miss reads the key and its version in one MGET, and the load's
// write is still refused when an invalidation bumps the version after that
// read.
func TestMissReadsVersionWithValue(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	_, ns := newProcess(t, holdfast.Options{Shared: tr, Logger: quiet}, holdfast.Policy{TTL: time.Minute})
	ctx := ctxT(t, 10*time.Second)
	gets, mgets := commandCalls(t, srv, "get"), commandCalls(t, srv, "mget")
	if _, err := ns.Get(ctx, "a", func(context.Context, string) ([]byte, error) { return []byte("A"), nil }); err != nil {
		t.Fatal(err)
	}
	// The one GET is SetIfVersion's script's, which commandstats counts;
	// the write may land after Get has answered.
	for deadline := time.Now().Add(5 * time.Second); commandCalls(t, srv, "get") == gets && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if g, m := commandCalls(t, srv, "get")-gets, commandCalls(t, srv, "mget")-mgets; g != 1 || m != 1 {
		t.Fatalf("a miss ran %d GET and %d MGET; want the key and its version in one MGET, and the script's GET", g, m)
	}
	if v, found, _ := tr.Get(ctx, "product:a"); !found || len(v) == 0 {
		t.Fatal("the load was not written to Redis")
	}
	res, err := ns.Get(ctx, "b", func(ctx context.Context, key string) ([]byte, error) {
		// Another process's write and invalidation land during the load.
		if err := tr.Invalidate(ctx, "product:b"); err != nil {
			return nil, err
		}
		return []byte("old"), nil
	})
	if err != nil || string(res.Value) != "old" {
		t.Fatalf("b: %q, %v", res.Value, err)
	}
	if _, found, _ := tr.Get(ctx, "product:b"); found {
		t.Fatal("a value loaded before an invalidation was written after it")
	}
}

// A read of a key whose copy here is past its soft time, which most often
// finds that copy in the tier and then loads, reads the key and its
// version in one MGET too: the load needs no Version GET of its own.
func TestPastSoftReadsVersionWithValue(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	_, ns := newProcess(t, holdfast.Options{Shared: tr, Logger: quiet},
		holdfast.Policy{TTL: time.Minute, SoftTTL: 100 * time.Millisecond, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	ctx := ctxT(t, 10*time.Second)
	load := func(context.Context, string) ([]byte, error) { return []byte("A"), nil }
	if _, err := ns.Get(ctx, "a", load); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the load's write", func() bool { _, found, _ := tr.Get(ctx, "product:a"); return found })
	time.Sleep(150 * time.Millisecond) // past the soft time
	gets, mgets := commandCalls(t, srv, "get"), commandCalls(t, srv, "mget")
	res, err := ns.Get(ctx, "a", load)
	if err != nil || res.Source != holdfast.SourceShared {
		t.Fatalf("past the soft time: %v from %v, want the shared copy", err, res.Source)
	}
	waitUntil(t, 5*time.Second, "the refresh's load", func() bool { return ns.Stats().Get("loads") == 2 })
	// The refresh's write may land after its load is counted.
	for deadline := time.Now().Add(5 * time.Second); commandCalls(t, srv, "get") == gets && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	// The read's MGET and the write's script's GET; reading the value
	// alone took a GET for it and one for the version.
	if g, m := commandCalls(t, srv, "get")-gets, commandCalls(t, srv, "mget")-mgets; g != 1 || m != 1 {
		t.Fatalf("a read past the soft time and its refresh ran %d GET and %d MGET; want one MGET, and the script's GET", g, m)
	}
}

// In a Cluster, versioned reads that mostly miss go to the primaries at
// once (a replica's miss would be asked again there), and go back to the
// replicas once they mostly hit.
func TestClusterVersionedReadsFollowMisses(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 60*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "vm:", ReadBudget: 500 * time.Millisecond,
		WriteTimeout: 2 * time.Second, Cluster: ClusterOptions{PrimaryAfterWrite: -1}})
	waitReady(t, tr, 6, 10*time.Second)
	replicaReads := func() (n uint64) {
		for _, s := range tr.NodeStats() {
			if !s.Primary {
				n += s.Reads
			}
		}
		return n
	}
	read := func(key string, want bool) {
		t.Helper()
		if l := tr.GetVersioned(ctx, key); l.Err != nil || l.Found != want {
			t.Fatalf("%s: %+v, want found %v", key, l, want)
		}
	}

	for i := range 30 { // the share of misses climbs past half
		read(fmt.Sprint("warm:", i), false)
	}
	before := replicaReads()
	for i := range 200 {
		read(fmt.Sprint("cold:", i), false)
	}
	if got := replicaReads() - before; got != 0 {
		t.Fatalf("replicas were asked %d of 200 versioned reads that missed; want every one at the primary", got)
	}

	const keys = 100
	items := make([]tier.Item, keys)
	for i := range items {
		items[i] = tier.Item{Key: fmt.Sprint("hot:", i), Value: []byte("v"), TTL: 10 * time.Minute}
	}
	if err := tr.Set(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil { // replicas caught up
		t.Fatal(err)
	}
	for i := range 30 { // the share of misses falls below half
		read(fmt.Sprint("hot:", i%keys), true)
	}
	// Replicas of a shard not read lately take reads again once polled
	// (ReadinessInterval): read until they answer a third of the reads
	// of a batch, for at most 10 s.
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := replicaReads()
		for i := range 150 {
			read(fmt.Sprint("hot:", i%keys), true)
		}
		got := replicaReads() - before
		if got >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas answered %d of 150 versioned reads that hit; want them to share the reads", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
