package lab

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/redis/rueidis"
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

// The naive mode with ReadReplicas routes as deployed replica-reading
// clients do: rueidis sends read-only commands (its GETs) to the node its
// ReadNodeSelector picks, primary or replica at random, with no readiness
// check, and writes (its SETs and DELs) to the primary. Without
// ReadReplicas, everything goes to primaries.
func TestNaiveReadsReplicas(t *testing.T) {
	srv, err := redistest.Launch(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get := c.B().Get().Key("k").Build()
	set := c.B().Set().Key("k").Value("v").Build()
	del := c.B().Del().Key("k").Build()

	o := naiveOptions(ReaderConfig{RedisAddrs: []string{srv.Addr()}, ReadReplicas: true})
	if o.SendToReplicas == nil || o.ReadNodeSelector == nil {
		t.Fatal("ReadReplicas: no SendToReplicas or ReadNodeSelector")
	}
	if !o.SendToReplicas(get) || o.SendToReplicas(set) || o.SendToReplicas(del) {
		t.Fatalf("SendToReplicas: GET %v, SET %v, DEL %v; want true, false, false",
			o.SendToReplicas(get), o.SendToReplicas(set), o.SendToReplicas(del))
	}
	nodes := []rueidis.NodeInfo{{Addr: "primary"}, {Addr: "replica"}}
	picked := map[int]int{}
	for range 1000 {
		picked[o.ReadNodeSelector(0, nodes)]++
	}
	// Each of two nodes at random: both, and nothing else, in 1,000 picks
	// (P(one never picked) is 2^-999).
	if len(picked) != 2 || picked[0] == 0 || picked[1] == 0 {
		t.Fatalf("ReadNodeSelector picked %v; want nodes 0 and 1", picked)
	}

	if o := naiveOptions(ReaderConfig{RedisAddrs: []string{srv.Addr()}}); o.SendToReplicas != nil || o.ReadNodeSelector != nil {
		t.Fatal("without ReadReplicas: reads sent to replicas")
	}
}
