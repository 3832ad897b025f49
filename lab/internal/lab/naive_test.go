package lab

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The naive mode's two-level cache: the local map answers within its TTL,
// even after another process's update; past it the read goes to Redis,
// where the writer's delete makes it load the new version.
func TestNaiveLocalTTL(t *testing.T) {
	srv, err := redistest.Launch(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	src := NewSource(SourceConfig{})
	src.Begin(time.Now(), 0, 0)
	ctx := context.Background()
	cfg := ReaderConfig{RedisAddrs: []string{srv.Addr()}, Load: src.Load, TTL: time.Minute, LocalTTL: 300 * time.Millisecond}
	reader, err := NewNaive(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	writer, err := NewNaive(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	tr := reader.(tieredReader)
	get := func() (int64, bool) {
		t.Helper()
		v, local, _, err := tr.GetTiered(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return ValueVersion(v), local
	}
	if v, local := get(); v != 0 || local {
		t.Fatalf("first read: version %d, local %v", v, local)
	}
	if v, local := get(); v != 0 || !local {
		t.Fatalf("second read: version %d, local %v", v, local)
	}
	src.Update("k")
	if err := writer.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if v, local := get(); v != 0 || !local {
		t.Fatalf("after another process's update: version %d, local %v; want the local entry", v, local)
	}
	time.Sleep(350 * time.Millisecond)
	if v, local := get(); v != 1 || local {
		t.Fatalf("past the local TTL: version %d, local %v; want 1 from the source", v, local)
	}
	if st := reader.Stats(); st["local_hits"] != 2 || st["local_entries"] != 1 {
		t.Fatalf("stats %v", st)
	}
}

// The naive mode with ReadReplicas reads as deployed replica-reading
// clients do: GETs reach the replicas (a node picked at random per read
// among the slot's primary and replica), with no check that a replica has
// its data; the SETs of its loads go to the primaries. Without it, replicas
// get no reads.
func TestNaiveReadsReplicas(t *testing.T) {
	c := testCluster(t)
	// A replica is in CLUSTER SLOTS, where rueidis finds it, once it has
	// replicated something.
	fillAll(t, c)
	if err := waitReplicasListed(c, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	src := NewSource(SourceConfig{})
	src.Begin(time.Now(), 0, 0)
	ctx := context.Background()
	reads := func(replicas bool) (primary, replica int64) {
		t.Helper()
		before := map[string]int64{}
		for _, a := range c.Addrs() {
			info, err := infoAll(a)
			if err != nil {
				t.Fatal(err)
			}
			before[a] = readCalls(info)
		}
		n, err := NewNaive(ctx, ReaderConfig{RedisAddrs: c.Addrs(), Load: src.Load, TTL: time.Minute, ReadReplicas: replicas})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		for i := range 300 {
			if _, _, err := n.Get(ctx, "product:"+strconv.Itoa(i%30)); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range c.Addrs() {
			info, err := infoAll(a)
			if err != nil {
				t.Fatal(err)
			}
			role, err := Role(a)
			if err != nil {
				t.Fatal(err)
			}
			if role == "replica" {
				replica += readCalls(info) - before[a]
			} else {
				primary += readCalls(info) - before[a]
			}
		}
		return primary, replica
	}
	// 300 reads, each sent to one of two nodes at random: P(none to a
	// replica) is 2^-300 or so, once the first 30 have loaded their keys.
	if p, r := reads(true); r == 0 || p == 0 || p+r != 300 {
		t.Fatalf("ReadReplicas: %d reads on primaries, %d on replicas; want 300, some on each", p, r)
	}
	if p, r := reads(false); r != 0 || p != 300 {
		t.Fatalf("primaries only: %d reads on primaries, %d on replicas; want 300, 0", p, r)
	}
}

// fillAll writes a key to every primary, so that every replica has
// replicated something.
func fillAll(t *testing.T, c *Cluster) {
	t.Helper()
	for _, n := range c.Nodes {
		if role, err := Role(n.Addr()); err != nil || role != "primary" {
			continue
		}
		if err := fillShard(c, n.Addr(), 10); err != nil {
			t.Fatal(err)
		}
	}
}
