package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

// parseClusterNodes: a shard per primary serving slots, its primary first
// and its replicas after; failed nodes, slot ranges being migrated and a
// primary with no slots left out.
func TestParseClusterNodes(t *testing.T) {
	text := strings.Join([]string{
		"a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-8191 [8192->-b2]",
		"b2 127.0.0.1:7002@17002 master - 0 0 2 connected 8192-16383",
		"c3 127.0.0.1:7003@17003 slave a1 0 0 1 connected",
		"d4 127.0.0.1:7004@17004 slave,fail b2 0 0 2 connected",
		"e5 127.0.0.1:7005@17005 slave b2 0 0 2 connected",
		"f6 127.0.0.1:7006@17006 master - 0 0 3 connected",
	}, "\n")
	r, err := parseClusterNodes(text)
	if err != nil {
		t.Fatal(err)
	}
	shards := map[string]string{}
	for _, sh := range r.shards {
		var a []string
		for _, i := range sh {
			a = append(a, r.addrs[i])
		}
		shards[a[0]] = strings.Join(a, " ")
	}
	want := map[string]string{
		"127.0.0.1:7001": "127.0.0.1:7001 127.0.0.1:7003",
		"127.0.0.1:7002": "127.0.0.1:7002 127.0.0.1:7005",
	}
	if len(shards) != len(want) || shards["127.0.0.1:7001"] != want["127.0.0.1:7001"] || shards["127.0.0.1:7002"] != want["127.0.0.1:7002"] {
		t.Fatalf("shards %v, want %v", shards, want)
	}
	for _, c := range []struct {
		slot    int
		primary string
	}{{0, "127.0.0.1:7001"}, {8191, "127.0.0.1:7001"}, {8192, "127.0.0.1:7002"}, {16383, "127.0.0.1:7002"}} {
		if got := r.addrs[r.shards[r.slot[c.slot]][0]]; got != c.primary {
			t.Errorf("slot %d: primary %s, want %s", c.slot, got, c.primary)
		}
	}
	for _, bad := range []string{
		"a1 127.0.0.1:7001@17001 master - 0 0 1 connected 0-16384",
		"a1 127.0.0.1:7001@17001 master - 0 0 1 connected 9-x",
		"a1 127.0.0.1:7001@17001 master - 0",
		"a1 127.0.0.1:7001@17001 master - 0 0 1 connected",
	} {
		if _, err := parseClusterNodes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The naive mode routed by CLUSTER NODES reads a replica that was
// restarted empty, as Lettuce's default topology does: its reads of a key
// the primary holds come back empty (misses) while the replica waits for
// its resync, where before the restart every read was a hit.
func TestNaiveRoutedReadsRestartedReplica(t *testing.T) {
	ctx := context.Background()
	c, err := StartCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitReplicasListed(c, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	src := NewSource(SourceConfig{})
	src.Begin(time.Now(), 0, 0)
	rd, err := NewNaive(ctx, ReaderConfig{RedisAddrs: c.Addrs(), Load: src.Load, TTL: time.Hour,
		ReadReplicas: true, RouteByClusterNodes: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	n := rd.(*Naive)
	if n.routed == nil || len(n.routed.shards) != 3 {
		t.Fatalf("routed: %+v; want 3 shards", n.routed)
	}
	const key = "product:1"
	sh := n.routed.shards[n.routed.slot[redis.Slot(key)]]
	if len(sh) != 2 {
		t.Fatalf("key's shard has %d nodes, want a primary and a replica", len(sh))
	}
	var replica *redistest.Process
	for _, p := range c.Nodes {
		if p.Addr() == n.routed.addrs[sh[1]] {
			replica = p
		}
	}
	if replica == nil {
		t.Fatalf("replica %s not among the cluster's nodes", n.routed.addrs[sh[1]])
	}
	if _, _, err := rd.Get(ctx, key); err != nil { // a miss, loaded and SET on the primary
		t.Fatal(err)
	}
	primary := n.routed.addrs[sh[0]]
	if _, err := Command(primary, time.Second, "WAIT", "1", "1000"); err != nil {
		t.Fatal(err)
	}
	reads := func(count int) (misses float64) {
		t.Helper()
		before := n.Stats()
		for range count {
			if _, _, err := rd.Get(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		return n.Stats()["misses"] - before["misses"]
	}
	if m := reads(100); m != 0 {
		t.Fatalf("before the restart: %v misses in 100 reads of a replicated key", m)
	}
	if calls := readCalls(mustInfo(t, replica.Addr())); calls == 0 {
		t.Fatal("before the restart: the replica served no reads")
	}
	// The primary waits 5 s before it sends a full resync (the production
	// default), so the replica stays empty while the reads below run.
	if _, err := Command(primary, time.Second, "CONFIG", "SET", "repl-diskless-sync-delay", "5"); err != nil {
		t.Fatal(err)
	}
	replica.Kill()
	if err := replica.Restart(); err != nil {
		t.Fatal(err)
	}
	if m := reads(100); m == 0 {
		t.Fatal("after the restart: no misses; want the empty replica's share of the reads to miss")
	}
}

func mustInfo(t *testing.T, addr string) map[string]string {
	t.Helper()
	info, err := infoAll(addr)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
