package redis

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// Reads while a slot moves between primaries, on a real 3+3 Cluster. The
// tier's map is left behind on purpose (no periodic refresh), as it is for
// up to TopologyInterval after a reshard: only the redirects the nodes
// answer can tell it.

// staleMapTier is a tier over cl whose slot map is refreshed only when a
// reply asks for it (TopologyInterval of an hour), and whose reads spread
// over primaries and replicas whatever it wrote (PrimaryAfterWrite off).
// It returns once its map holds the six nodes, all ready.
func staleMapTier(t *testing.T, cl *redistest.RedisCluster, prefix string) *Tier {
	t.Helper()
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: prefix, ReadBudget: time.Second,
		Cluster: ClusterOptions{TopologyInterval: time.Hour, PrimaryAfterWrite: -1}})
	waitMapComplete(t, tr)
	return tr
}

// waitMapComplete waits until tr's map holds the six nodes, all ready,
// asking for the map again meanwhile: CLUSTER SLOTS lists a replica only
// once its offset has been gossiped.
func waitMapComplete(t *testing.T, tr *Tier) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := 0
		for _, s := range tr.NodeStats() {
			if s.State == NodeReady {
				ready++
			}
		}
		if ready == 6 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("map not complete: %+v", tr.NodeStats())
		}
		tr.nodes.kickTopology()
		time.Sleep(50 * time.Millisecond)
	}
}

// tagsOn returns n hash tags whose slots, all different and not in avoid,
// tr's map gives to the primary addr.
func tagsOn(tr *Tier, addr string, n int, avoid ...uint16) []string {
	var tags []string
	seen := map[uint16]bool{}
	for _, a := range avoid {
		seen[a] = true
	}
	for i := 0; len(tags) < n; i++ {
		tag := "t" + strconv.Itoa(i)
		sl := slot(tag)
		if !seen[sl] && tr.nodes.primaryFor(sl).addr == addr {
			seen[sl] = true
			tags = append(tags, tag)
		}
	}
	return tags
}

// keysOf returns n tier keys in tag's slot.
func keysOf(tag string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("m:{%s}:%d", tag, i)
	}
	return keys
}

// writeKeys stores each key's own name, with prefix, as its value, through
// a client of its own.
func writeKeys(t *testing.T, cl *redistest.RedisCluster, prefix string, keys []string) {
	t.Helper()
	raw := rawClient(t, cl.Addrs()...)
	ctx := ctxT(t, 10*time.Second)
	for _, k := range keys {
		if err := raw.Do(ctx, raw.B().Set().Key(prefix+k).Value(k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
}

// readTally counts what reads of keys written by writeKeys returned.
type readTally struct {
	reads, errs, wrong atomic.Int64
	mu                 sync.Mutex
	first              []string // the first few problems
}

func (r *readTally) note(key string, v []byte, found bool, err error) {
	r.reads.Add(1)
	switch {
	case err != nil:
		r.errs.Add(1)
	case !found || string(v) != key:
		r.wrong.Add(1)
		err = fmt.Errorf("found %v, value %q", found, v)
	default:
		return
	}
	r.mu.Lock()
	if len(r.first) < 5 {
		r.first = append(r.first, fmt.Sprintf("%s: %v", key, err))
	}
	r.mu.Unlock()
}

// readAll reads every key with Get and all of them with one GetMany, from
// readers goroutines at once, rounds times each.
func (r *readTally) readAll(ctx context.Context, tr *Tier, keys []string, readers, rounds int) {
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				for _, k := range keys {
					v, found, err := tr.Get(ctx, k)
					r.note(k, v, found, err)
				}
				ls, _ := tr.GetMany(ctx, keys)
				for i, l := range ls {
					r.note(keys[i], l.Value, l.Found, l.Err)
				}
			}
		}()
	}
	wg.Wait()
}

func (r *readTally) check(t *testing.T, what string) {
	t.Helper()
	t.Logf("%s: %d reads, %d errors, %d wrong or missing", what, r.reads.Load(), r.errs.Load(), r.wrong.Load())
	if r.errs.Load() != 0 || r.wrong.Load() != 0 {
		t.Fatalf("%s: %d errors and %d wrong values in %d reads; first: %v", what, r.errs.Load(), r.wrong.Load(), r.reads.Load(), r.first)
	}
}

// noEjections fails when any node was ejected or failed a request.
func noEjections(t *testing.T, tr *Tier) {
	t.Helper()
	for _, s := range tr.NodeStats() {
		if s.Ejections != 0 || s.Failures != 0 || s.State == NodeEjected {
			t.Fatalf("node %s: %d ejections, %d failures, %v; all: %+v", s.Addr, s.Ejections, s.Failures, s.State, tr.NodeStats())
		}
	}
	if st := tr.Stats(); st.Errors != 0 || st.Bypassed != 0 || st.BreakerOpens != 0 {
		t.Fatalf("tier stats %+v", st)
	}
}

// anotherPrimary returns a primary of tr's map other than addr.
func anotherPrimary(t *testing.T, tr *Tier, cl *redistest.RedisCluster, addr string) *redistest.Server {
	t.Helper()
	for _, s := range tr.NodeStats() {
		if s.Primary && s.Addr != addr {
			return serverByAddr(cl, s.Addr)
		}
	}
	t.Fatal("no other primary")
	return nil
}

// slotFixture starts a Cluster and writes, in each of len(sizes) slots of
// one primary, from, sizes[i] keys (keys[i]); tr reads them over a map
// that follows the cluster only when a reply tells it to (staleMapTier).
func slotFixture(t *testing.T, prefix string, sizes ...int) (cl *redistest.RedisCluster, tr *Tier, from *redistest.Server, keys [][]string) {
	t.Helper()
	skipShort(t)
	redistest.Require(t)
	cl = redistest.Cluster(t)
	probe := newTier(t, Options{Addrs: cl.Addrs()[:1]})
	src := probe.nodes.primaryFor(0).addr
	for i, tag := range tagsOn(probe, src, len(sizes)) {
		keys = append(keys, keysOf(tag, sizes[i]))
	}
	writeKeys(t, cl, prefix, slices.Concat(keys...))
	return cl, staleMapTier(t, cl, prefix), serverByAddr(cl, src), keys
}

// TestClusterSlotMoved: a slot's keys are migrated and the slot assigned to
// another primary while the tier's map still gives it to the old one. The
// old primary and its replica answer MOVED; reads of the slot return their
// values with no error, no node is ejected, the old primary's other slots
// keep being served, and the map follows without its periodic refresh.
func TestClusterSlotMoved(t *testing.T) {
	const prefix = "mv:"
	cl, tr, from, keys := slotFixture(t, prefix, 30, 30, 30)
	ctx := ctxT(t, 2*time.Minute)
	src, moved, all := from.Addr(), keys[0], slices.Concat(keys...)
	var before readTally
	before.readAll(ctx, tr, all, 1, 2)
	before.check(t, "before the move")

	to := anotherPrimary(t, tr, cl, src)
	sl := int(slot(prefix + moved[0]))
	m, err := cl.MigrateSlot(ctx, sl, from, to, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if primaryOf(tr, prefix+moved[0]) != src {
		t.Fatal("the tier's map followed the move before any read")
	}
	srcReads := nodeStat(tr, src).Reads
	var after readTally
	after.readAll(ctx, tr, all, 4, 10)
	after.check(t, fmt.Sprintf("slot %d moved from %s to %s", sl, src, to.Addr()))
	noEjections(t, tr)
	if got := nodeStat(tr, src).Reads - srcReads; got == 0 {
		t.Fatalf("the old primary served none of its other slots' reads: %+v", tr.NodeStats())
	}
	deadline := time.Now().Add(10 * time.Second)
	for primaryOf(tr, prefix+moved[0]) != to.Addr() {
		if time.Now().After(deadline) {
			t.Fatalf("the map still gives slot %d to %s after the MOVED replies", sl, primaryOf(tr, prefix+moved[0]))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readonlyGet is what srv answers to GET key on a READONLY connection, as
// the tier's node connections are.
func readonlyGet(t *testing.T, srv *redistest.Server, key string) string {
	t.Helper()
	cmd := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port()))
	cmd.Stdin = strings.NewReader("READONLY\nGET " + key + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli: %v: %s", err, out)
	}
	_, reply, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(reply)
}

// TestClusterSlotMigrating: a slot is half migrated (MIGRATING on the
// source, IMPORTING on the target, part of its keys moved with MIGRATE).
// The source primary answers ASK for the keys it no longer has, but its
// replica answers nil for them; every read, Get and GetMany alike, returns
// the key's value wherever it sits, with no error and no ejection, as more
// keys move and after the slot is handed over.
func TestClusterSlotMigrating(t *testing.T) {
	const prefix = "mg:"
	cl, tr, from, keys := slotFixture(t, prefix, 40, 20)
	ctx := ctxT(t, 2*time.Minute)
	src, migrating, all := from.Addr(), keys[0], slices.Concat(keys...)
	to := anotherPrimary(t, tr, cl, src)
	sl := int(slot(prefix + migrating[0]))
	m, err := cl.MigrateSlot(ctx, sl, from, to, 20)
	if err != nil {
		t.Fatal(err)
	}
	count := func(s *redistest.Server) string {
		n, _ := s.CLI(ctx, "CLUSTER", "COUNTKEYSINSLOT", strconv.Itoa(sl))
		return n
	}
	if f, g := count(from), count(to); f != "20" || g != "20" {
		t.Fatalf("after moving 20 keys: %s on the source, %s on the target", f, g)
	}
	var replica *redistest.Server
	for _, s := range tr.NodeStats() {
		if s.Of == src {
			replica = serverByAddr(cl, s.Addr)
		}
	}
	if k, err := to.CLI(ctx, "CLUSTER", "GETKEYSINSLOT", strconv.Itoa(sl), "1"); err != nil || k == "" {
		t.Fatalf("no key on the target: %q %v", k, err)
	} else {
		t.Logf("a moved key: the source answers %q, its replica %q", readonlyGet(t, from, k), readonlyGet(t, replica, k))
	}

	var half readTally
	half.readAll(ctx, tr, all, 4, 8)
	half.check(t, "20 of 40 keys moved")
	if _, err := m.MoveKeys(ctx, 10); err != nil {
		t.Fatal(err)
	}
	var more readTally
	more.readAll(ctx, tr, all, 4, 8)
	more.check(t, "30 of 40 keys moved")
	if err := m.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	var done readTally
	done.readAll(ctx, tr, all, 4, 8)
	done.check(t, "slot handed over")
	noEjections(t, tr)
}
