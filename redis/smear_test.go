package redis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// evenSlots splits the slots into n contiguous ranges, as redis-cli
// --cluster create does.
func evenSlots(n int) *[slotCount]int16 {
	var s [slotCount]int16
	for sl := range s {
		s[sl] = int16(sl * n / slotCount)
	}
	return &s
}

// TestCopyKeysOnDistinctPrimaries: a key's copies land on primaries that
// hold neither the key nor another copy, min(copies, primaries) − 1 of them,
// the same ones every time (every process must find the same copies).
func TestCopyKeysOnDistinctPrimaries(t *testing.T) {
	uneven := evenSlots(4)
	for sl := 0; sl < 100; sl++ {
		uneven[sl] = 3 // shard 3 also owns 100 slots at the start
	}
	for sl := 100; sl < slotCount; sl++ {
		if uneven[sl] == 3 {
			uneven[sl] = 2
		}
	}
	for _, tc := range []struct {
		name   string
		slots  *[slotCount]int16
		shards int
		copies int
	}{
		{"3 primaries, 5 copies", evenSlots(3), 3, 5},
		{"10 primaries, 5 copies", evenSlots(10), 10, 5},
		{"1 primary", evenSlots(1), 1, 5},
		{"4 primaries, one of 100 slots", uneven, 4, 4},
		{"2 copies", evenSlots(10), 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := min(tc.copies, tc.shards) - 1
			for i := 0; i < 2000; i++ {
				full := "p:product:" + strconv.Itoa(i)
				keys := copyKeys(tc.slots, tc.shards, "p:", full, tc.copies)
				if len(keys) != want {
					t.Fatalf("%s: %d copies, want %d", full, len(keys), want)
				}
				seen := map[int16]bool{tc.slots[slot(full)]: true}
				for _, k := range keys {
					if !strings.HasSuffix(k, "}"+full[len("p:"):]) || !strings.HasPrefix(k, "p:{") {
						t.Fatalf("copy %q does not name %q", k, full)
					}
					sh := tc.slots[slot(k)]
					if seen[sh] {
						t.Fatalf("%s: copies %v share primary %d", full, keys, sh)
					}
					seen[sh] = true
				}
				again := copyKeys(tc.slots, tc.shards, "p:", full, tc.copies)
				if strings.Join(again, ",") != strings.Join(keys, ",") {
					t.Fatalf("%s: copies %v, then %v", full, keys, again)
				}
			}
		})
	}
}

// TestSamePartition: renumbered shards are the same partition; a moved slot
// is not.
func TestSamePartition(t *testing.T) {
	a := evenSlots(3)
	b := *a
	for sl := range b {
		b[sl] = 2 - b[sl]
	}
	if !samePartition(a, 3, &b, 3) {
		t.Fatal("renumbered shards: not the same partition")
	}
	b[0] = b[slotCount-1] // slot 0 moves to the last range's primary
	if samePartition(a, 3, &b, 3) {
		t.Fatal("a moved slot: still the same partition")
	}
	if samePartition(a, 3, evenSlots(4), 4) {
		t.Fatal("4 primaries: the same partition as 3")
	}
}

// smearSource is the source of truth: each key's value carries a version
// that update raises.
type smearSource struct {
	mu    sync.Mutex
	ver   map[string]int
	loads atomic.Int64
}

func (s *smearSource) Load(ctx context.Context, key string) ([]byte, error) {
	s.loads.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return []byte(fmt.Sprintf("%s=v%d", key, s.ver[key])), nil
}

func (s *smearSource) update(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ver == nil {
		s.ver = map[string]int{}
	}
	s.ver[key]++
	return fmt.Sprintf("%s=v%d", key, s.ver[key])
}

// smearCache is one process: its own Tier and Cache, one namespace.
func smearCache(t *testing.T, addrs []string, hot holdfast.HotPolicy) (*Tier, *holdfast.Namespace) {
	t.Helper()
	tr := newTier(t, Options{Addrs: addrs, KeyPrefix: "sm:", ReadBudget: 200 * time.Millisecond, WriteTimeout: time.Second,
		Cluster: ClusterOptions{PrimaryAfterWrite: -1}})
	c, err := holdfast.New(holdfast.Options{Shared: tr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns, err := c.Namespace("product", holdfast.Policy{TTL: 10 * time.Minute, Hot: hot})
	if err != nil {
		t.Fatal(err)
	}
	return tr, ns
}

// readMany reads key n times from g goroutines, each pausing 200 µs
// between reads (else every read joins the first flight, which stays open
// until its write to Redis is done), and returns the values seen.
func readMany(t *testing.T, ns *holdfast.Namespace, key string, l holdfast.Loader, n, g int) map[string]int {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			for i := w; i < n; i += g {
				res, err := ns.Get(context.Background(), key, l)
				if err != nil {
					failed.Add(1)
					continue
				}
				local[string(res.Value)]++
				time.Sleep(200 * time.Microsecond)
			}
			mu.Lock()
			for k, v := range local {
				seen[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d reads of %s failed", failed.Load(), key)
	}
	return seen
}

// shardReads is the reads each primary's shard (the primary and its
// replicas) served, from the Tier's per-node counters.
func shardReads(tr *Tier) []uint64 {
	tp := tr.nodes.topo.Load()
	out := make([]uint64, len(tp.shards))
	for i, sh := range tp.shards {
		for _, n := range sh.nodes {
			out[i] += n.reads.load()
		}
	}
	return out
}

// rawGet reads a full key straight from the cluster.
func rawGet(t *testing.T, rc rueidis.Client, full string) (string, bool) {
	t.Helper()
	v, err := rc.Do(ctxT(t, 5*time.Second), rc.B().Get().Key(full).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("GET %s: %v", full, err)
	}
	return v, true
}

// TestClusterSmearing, on a real 3 + 3 Cluster: a key that turns hot is
// read from copies on every primary, so the primaries share its reads; the
// copies are filled from the key and written with it; an invalidation,
// from a process where the key is hot and from one that never saw it hot,
// leaves no copy readable, and a load that read the source before the
// invalidation writes no copy after it.
func TestClusterSmearing(t *testing.T) {
	skipShort(t)
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 120*time.Second)
	addrs := cl.Addrs()[:1]
	src := &smearSource{}
	src.update("viral")

	// reader keeps no hot tier, so that every read reaches Redis.
	rtr, reader := smearCache(t, addrs, holdfast.HotPolicy{MaxBytes: -1, Threshold: 20, HalfLife: time.Second})
	// local has the hot tier, hot keys only (the default with Redis).
	ltr, local := smearCache(t, addrs, holdfast.HotPolicy{Threshold: 20, HalfLife: time.Second})
	// other never reads the key: it only invalidates.
	_, other := smearCache(t, addrs, holdfast.HotPolicy{Threshold: 20, HalfLife: time.Second})
	rc := rawClient(t, addrs...)

	warm := make([]tier.Item, 300)
	for i := range warm {
		warm[i] = tier.Item{Key: "warm:" + strconv.Itoa(i), Value: []byte("w"), TTL: time.Minute}
	}
	if err := rtr.Set(ctx, warm...); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitReady(t, rtr, 6, 15*time.Second)

	full := "sm:product:viral"
	copies := rtr.copiesOf(full, false)
	if len(copies) != 2 {
		t.Fatalf("copies %v, want 2 (3 primaries)", copies)
	}
	owners := map[string]bool{primaryOf(rtr, full): true}
	for _, k := range copies {
		owners[primaryOf(rtr, k)] = true
	}
	if len(owners) != 3 {
		t.Fatalf("key and copies on %d primaries, want 3: %v", len(owners), owners)
	}

	// The key turns hot: the first reads go to the key itself; once it is
	// hot, to a random copy, which is filled from the key when it misses.
	v1 := fmt.Sprintf("viral=v%d", 1)
	if seen := readMany(t, reader, "viral", src.Load, 3000, 4); seen[v1] != 3000 {
		t.Fatalf("values read: %v", seen)
	}
	st, rs := rtr.Stats(), reader.Stats()
	t.Logf("turning hot: copy reads %d, fallbacks %d, fills %d; cache smeared reads %d, writes %d", st.CopyReads, st.CopyFallbacks, st.CopyFills, rs.Get("smeared.reads"), rs.Get("smeared.writes"))
	// The copies come from a fill after a copy read missed, or from the
	// first load's write when the key was hot by the time it was written.
	if st.CopyReads == 0 || st.CopyFills+rs.Get("smeared.writes") == 0 {
		t.Fatalf("no copy reads (%d), or copies neither filled (%d) nor written (%d)", st.CopyReads, st.CopyFills, rs.Get("smeared.writes"))
	}
	waitFor(t, 5*time.Second, func() bool {
		for _, k := range copies {
			if v, ok := rawGet(t, rc, k); !ok || !strings.HasSuffix(v, v1) {
				return false
			}
		}
		return true
	})

	// Hot and smeared: the three shards share the key's reads.
	before := shardReads(rtr)
	if seen := readMany(t, reader, "viral", src.Load, 6000, 4); seen[v1] != 6000 {
		t.Fatalf("values read: %v", seen)
	}
	after := shardReads(rtr)
	var total, most uint64
	for i := range after {
		d := after[i] - before[i]
		total += d
		most = max(most, d)
	}
	mean := float64(total) / float64(len(after))
	t.Logf("smeared reads per shard %v (of %d): max/mean %.3f", diff(after, before), total, float64(most)/mean)
	if float64(most)/mean > 1.5 {
		t.Fatalf("max/mean %.2f across shards: the copies do not share the reads", float64(most)/mean)
	}
	if src.loads.Load() != 1 {
		t.Fatalf("%d loads, want 1", src.loads.Load())
	}

	// An update invalidated where the key is hot and in the hot tier: no
	// copy and no tier answers the old value.
	readMany(t, local, "viral", src.Load, 2000, 4)
	if res, err := local.Get(ctx, "viral", src.Load); err != nil || res.Source != holdfast.SourceHot {
		t.Fatalf("local read: %v, %v; want the hot tier", res.Source, err)
	}
	v2 := src.update("viral")
	if err := local.Invalidate(ctx, "viral"); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rc, full, copies)
	for name, ns := range map[string]*holdfast.Namespace{"reader": reader, "local": local} {
		if seen := readMany(t, ns, "viral", src.Load, 1500, 4); len(seen) != 1 || seen[v2] != 1500 {
			t.Fatalf("%s after the invalidation read %v, want only %s", name, seen, v2)
		}
	}
	waitFor(t, 5*time.Second, func() bool {
		for _, k := range copies {
			if v, ok := rawGet(t, rc, k); !ok || !strings.HasSuffix(v, v2) {
				return false
			}
		}
		return true
	})

	// A load that read the key's version, then the source, before an
	// invalidation cannot write the key or any copy after it.
	ver, err := ltr.Version(ctx, "product:viral")
	if err != nil {
		t.Fatal(err)
	}
	v3 := src.update("viral")
	if err := other.Invalidate(ctx, "viral"); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rc, full, copies)
	stored, err := ltr.SetSmearedIfVersion(ctx, tier.Item{Key: "product:viral", Value: []byte("stale " + v2), TTL: time.Minute}, ver)
	if err != nil || stored {
		t.Fatalf("stale set after invalidation: stored %v, err %v", stored, err)
	}
	assertGone(t, rc, full, copies)

	// The key cools (demoted in every process), then an update is
	// invalidated by a process that never saw it hot: the copies written
	// while it was hot are deleted all the same.
	readMany(t, reader, "viral", src.Load, 2000, 4) // hot again: copies hold v3
	waitFor(t, 5*time.Second, func() bool {
		v, ok := rawGet(t, rc, copies[0])
		return ok && strings.HasSuffix(v, v3)
	})
	waitFor(t, 20*time.Second, func() bool { return len(reader.Stats().HotKeys()) == 0 && len(local.Stats().HotKeys()) == 0 })
	src.update("viral")
	if err := other.Invalidate(ctx, "viral"); err != nil {
		t.Fatal(err)
	}
	assertGone(t, rc, full, copies)
	if st := rtr.Stats(); st.Errors != 0 || st.SetErrors != 0 {
		t.Fatalf("tier errors: %+v", st)
	}
}

func diff(a, b []uint64) []uint64 {
	out := make([]uint64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// assertGone fails unless full and each of its copies are absent, and each
// copy's version is at least the key's.
func assertGone(t *testing.T, rc rueidis.Client, full string, copies []string) {
	t.Helper()
	for _, k := range append([]string{full}, copies...) {
		if v, ok := rawGet(t, rc, k); ok {
			t.Fatalf("%s still holds %q after the invalidation", k, v)
		}
	}
	kv, _ := rawGet(t, rc, "{"+full+"}:v")
	want, _ := strconv.ParseFloat(kv, 64)
	for _, k := range copies {
		cv, _ := rawGet(t, rc, k+":v")
		got, _ := strconv.ParseFloat(cv, 64)
		if got < want || math.IsNaN(got) {
			t.Fatalf("copy %s version %q below the key's %q", k, cv, kv)
		}
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkCopyKeys is what choosing a hot key's copies costs each smeared
// read and write: 5 copies over 3 and over 10 primaries.
func BenchmarkCopyKeys(b *testing.B) {
	for _, shards := range []int{3, 10} {
		slots := evenSlots(shards)
		b.Run(fmt.Sprint(shards, "-primaries"), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if len(copyKeys(slots, shards, "shop:", "shop:product:12345", 5)) == 0 {
					b.Fatal("no copies")
				}
			}
		})
	}
}

// TestCopiesAfterResharding: Invalidate's copies include those chosen under
// the previous slot map, so a resharding cannot leave an old copy behind;
// reads and writes use the current map only.
func TestCopiesAfterResharding(t *testing.T) {
	tr, _, _ := fakeShardTier(t)
	tp := &topology{slots: *evenSlots(3), shards: make([]shard, 3), prev: &partition{slots: *evenSlots(4), shards: 4}}
	tr.nodes.topo.Store(tp)
	full := "product:42"
	now := tr.copiesOf(full, false)
	before := copyKeys(&tp.prev.slots, 4, "", full, DefaultHotCopies)
	all := tr.copiesOf(full, true)
	if len(now) != 2 || len(before) != 3 {
		t.Fatalf("copies now %v, before %v", now, before)
	}
	for _, k := range append(append([]string{}, now...), before...) {
		if !slices.Contains(all, k) {
			t.Fatalf("invalidation's copies %v lack %s", all, k)
		}
	}
	if len(all) > len(now)+len(before) {
		t.Fatalf("invalidation's copies %v repeat keys", all)
	}
}
