package redis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/internal/testhook"
)

// versionedSource is a database whose keys have versions that updates bump.
type versionedSource struct {
	mu   sync.Mutex
	vers map[string]int
}

func (s *versionedSource) Load(ctx context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Appendf(nil, "%s@%d", key, s.vers[key]), nil
}

func (s *versionedSource) update(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vers == nil {
		s.vers = make(map[string]int)
	}
	s.vers[key]++
	return fmt.Sprintf("%s@%d", key, s.vers[key])
}

// hotPolicy keeps every key read in the hot tier for an hour: only the
// stream can make a process drop its copy.
var hotPolicy = holdfast.Policy{TTL: time.Hour, StaleIfError: time.Hour, Hot: holdfast.HotPolicy{Threshold: -1, TTL: time.Hour, MaxUnheard: time.Minute}}

// newListeningCache is a Cache on a Tier of its own ("a process") whose
// stream has been heard.
func newListeningCache(t *testing.T, o Options, p holdfast.Policy) (*holdfast.Cache, *holdfast.Namespace) {
	t.Helper()
	c, ns := newProcess(t, holdfast.Options{Shared: newTier(t, o), Logger: quiet}, p)
	waitUntil(t, 10*time.Second, "the stream to be heard", func() bool { return testhook.StreamHeard(c) })
	return c, ns
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func get(t *testing.T, ns *holdfast.Namespace, key string, l holdfast.Loader) holdfast.Result {
	t.Helper()
	res, err := ns.Get(context.Background(), key, l)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return res
}

// An update invalidated on one process is served by the others within
// milliseconds, although their hot copies had an hour to live.
func TestStreamPropagatesUpdates(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			addrs := serverAddrs(t, mode)
			src := &versionedSource{}
			_, writer := newListeningCache(t, Options{Addrs: addrs}, hotPolicy)
			readers := make([]*holdfast.Namespace, 3)
			for i := range readers {
				_, readers[i] = newListeningCache(t, Options{Addrs: addrs}, hotPolicy)
			}
			keys := []string{"p1", "p2", "p3", "p4"}
			for _, ns := range readers {
				for _, k := range keys {
					get(t, ns, k, src.Load)
				}
				for _, k := range keys {
					waitUntil(t, 5*time.Second, k+" hot", func() bool { return get(t, ns, k, src.Load).Source == holdfast.SourceHot })
				}
			}
			// Beside the stream, a RESP3 client tracking the namespace's
			// keys in broadcast mode, to count what tracking would have
			// announced for the same updates.
			var tracked atomic.Int64
			tracker, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress: addrs, ClientTrackingOptions: []string{"PREFIX", "product:", "BCAST"},
				OnInvalidations: func(ms []rueidis.RedisMessage) { tracked.Add(int64(len(ms))) },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer tracker.Close()
			if err := tracker.Do(context.Background(), tracker.B().Ping().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			var lags []time.Duration
			for i := range 40 {
				k := keys[i%len(keys)]
				want := src.update(k)
				start := time.Now()
				if err := writer.Invalidate(context.Background(), k); err != nil {
					t.Fatal(err)
				}
				returned := time.Now()
				for _, ns := range readers {
					waitUntil(t, 5*time.Second, "the update of "+k, func() bool { return string(get(t, ns, k, src.Load).Value) == want })
				}
				lags = append(lags, time.Since(returned))
				_ = start
				for _, ns := range readers { // hot again before the next update
					waitUntil(t, 5*time.Second, k+" hot again", func() bool { return get(t, ns, k, src.Load).Source == holdfast.SourceHot })
				}
			}
			if mode == "standalone" {
				// Each update is a DEL, then each reader's refill a SET:
				// tracking reports every one of them to every process.
				t.Logf("client tracking announced %d changes for the 40 updates; the stream 40", tracked.Load())
				if tracked.Load() <= 40 {
					t.Fatalf("client tracking announced %d changes for 40 updates: the README says refills are announced too", tracked.Load())
				}
			}
			slices.Sort(lags)
			p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
			t.Logf("%s: every reader served the update %v after Invalidate returned (p50), %v (p99), %v (max)", mode, p50, p99, lags[len(lags)-1])
			// Milliseconds on a quiet machine; a second of margin for a
			// loaded one. Without the stream each would take an hour.
			if p99 > time.Second {
				t.Fatalf("p99 %v from Invalidate returning to every reader serving the update", p99)
			}
			for i, ns := range readers {
				if st := ns.Stats(); st.Get("invalidations.applied") == 0 || st.Get("invalidations.heard") < 40 {
					t.Fatalf("reader %d heard %d, applied %d", i, st.Get("invalidations.heard"), st.Get("invalidations.applied"))
				}
			}
		})
	}
}

// The server freezes (SIGSTOP): the reader cannot hear, reports the loss
// when its subscription has been silent for three PingIntervals (200 ms
// here), long before five of the heartbeats that go every second would be
// overdue, and keeps serving its hot copy (no flush);
// an update made meanwhile is replayed after the thaw, heard, and served
// within a second.
func TestStreamThroughAFrozenServer(t *testing.T) {
	srv := redistest.Standalone(t)
	o := Options{Addrs: []string{srv.Addr()}, PingTimeout: 300 * time.Millisecond,
		Stream: StreamOptions{PingInterval: 200 * time.Millisecond}}
	src := &versionedSource{}
	_, writer := newListeningCache(t, o, hotPolicy)
	rc, reader := newListeningCache(t, o, hotPolicy)
	old := string(get(t, reader, "p1", src.Load).Value)
	get(t, reader, "p2", src.Load)
	waitUntil(t, 5*time.Second, "p1 hot", func() bool { return get(t, reader, "p1", src.Load).Source == holdfast.SourceHot })
	waitUntil(t, 5*time.Second, "p2 hot", func() bool { return get(t, reader, "p2", src.Load).Source == holdfast.SourceHot })
	probe := newTier(t, o)
	for _, k := range []string{"product:p1", "product:p2"} {
		waitUntil(t, 5*time.Second, k+" in Redis", func() bool { _, ok, _ := probe.Get(context.Background(), k); return ok })
	}

	// Idle, the two listening processes publish a heartbeat a second
	// each: in a Cluster, each one reaches every node.
	pub0 := commandCalls(t, srv, "publish")
	time.Sleep(2 * time.Second)
	if pubs := commandCalls(t, srv, "publish") - pub0; pubs > 8 {
		t.Errorf("%d PUBLISHes in 2 s from 2 idle processes, want about 4", pubs)
	}

	srv.Freeze()
	frozen := time.Now()
	waitUntil(t, 10*time.Second, "the reader to report the loss", func() bool { return !testhook.StreamHeard(rc) })
	// Three silent PingIntervals. The frozen connection's Close, which
	// takes about a second, must not come before the report: with it the
	// loss came 1.4–1.5 s after the freeze.
	lost := time.Since(frozen)
	t.Logf("loss reported %v after the freeze", lost)
	if lost > time.Second {
		t.Errorf("loss reported %v after the freeze, want about 600 ms", lost)
	}
	want := src.update("p1")
	if err := writer.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		res := get(t, reader, "p1", src.Load)
		if res.Source != holdfast.SourceHot || string(res.Value) != old {
			t.Fatalf("frozen server: %q from %v, want the hot copy %q", res.Value, res.Source, old)
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Thaw()
	thawed := time.Now()
	waitUntil(t, 10*time.Second, "the update after the thaw", func() bool { return string(get(t, reader, "p1", src.Load).Value) == want })
	took := time.Since(thawed)
	t.Logf("served the update %v after the thaw", took)
	if took > 3*time.Second {
		t.Fatalf("the update took %v after the thaw (replay every 500 ms, a heartbeat every 20 ms until heard)", took)
	}
	waitUntil(t, 5*time.Second, "the hot copies from before the freeze dropped", func() bool { return reader.Stats().Get("stream.gap_dropped") > 0 })
	// p2, unchanged, is read again from Redis, not loaded.
	loads := reader.Stats().Get("loads")
	waitUntil(t, 5*time.Second, "p2 hot again", func() bool { return get(t, reader, "p2", src.Load).Source == holdfast.SourceHot })
	if n := reader.Stats().Get("loads") - loads; n != 0 {
		t.Fatalf("p2, unchanged, loaded %d times after the thaw, want 0: read again from Redis", n)
	}
}

// The server is killed and restarted empty: the reader subscribes again and
// drops its hot copies from before.
func TestStreamAfterARestartEmpty(t *testing.T) {
	srv := redistest.Standalone(t)
	o := Options{Addrs: []string{srv.Addr()}}
	src := &versionedSource{}
	rc, reader := newListeningCache(t, o, hotPolicy)
	get(t, reader, "p1", src.Load)
	waitUntil(t, 5*time.Second, "p1 hot", func() bool { return get(t, reader, "p1", src.Load).Source == holdfast.SourceHot })
	srv.Kill()
	waitUntil(t, 10*time.Second, "the reader to report the loss", func() bool { return !testhook.StreamHeard(rc) })
	srv.Restart()
	waitUntil(t, 10*time.Second, "the stream heard again", func() bool { return testhook.StreamHeard(rc) })
	waitUntil(t, 5*time.Second, "p1's hot copy dropped", func() bool { return reader.Stats().Get("stream.gap_dropped") == 1 })
	// Another process invalidates after the restart: heard again.
	_, writer := newListeningCache(t, o, hotPolicy)
	get(t, reader, "p1", src.Load)
	waitUntil(t, 5*time.Second, "p1 hot", func() bool { return get(t, reader, "p1", src.Load).Source == holdfast.SourceHot })
	want := src.update("p1")
	if err := writer.Invalidate(context.Background(), "p1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the update", func() bool { return string(get(t, reader, "p1", src.Load).Value) == want })
}

// In a Cluster, the node a process listens on is killed: it subscribes on
// another and hears the next update.
func TestStreamMovesOffAKilledNode(t *testing.T) {
	cl := redistest.Cluster(t)
	o := Options{Addrs: cl.Addrs(), PingTimeout: 300 * time.Millisecond}
	src := &versionedSource{}
	_, writer := newListeningCache(t, o, hotPolicy)
	rc, reader := newListeningCache(t, o, hotPolicy)
	ctx := context.Background()
	// Kill a replica, so that the key's primary keeps taking the
	// invalidation: the reader listens on it at random or not, and must
	// hear the update either way.
	victim := cl.Replicas(ctx)[0]
	get(t, reader, "p1", src.Load)
	waitUntil(t, 5*time.Second, "p1 hot", func() bool { return get(t, reader, "p1", src.Load).Source == holdfast.SourceHot })
	victim.Kill()
	time.Sleep(time.Second) // past a heartbeat's deadline, had the reader been on it
	waitUntil(t, 15*time.Second, "the stream heard", func() bool { return testhook.StreamHeard(rc) })
	want := src.update("p1")
	if err := writer.Invalidate(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the update", func() bool { return string(get(t, reader, "p1", src.Load).Value) == want })
}

func FuzzDecodeAnnouncement(f *testing.F) {
	f.Add(string(appendAnnouncement(nil, "product:42", time.Unix(0, 1700000000123456789), "origin")))
	f.Add("")
	f.Add("hf1")
	f.Add("hf1\xff")
	f.Add("not an announcement")
	f.Fuzz(func(t *testing.T, msg string) {
		key, at, origin, err := decodeAnnouncement(msg)
		if err != nil {
			return
		}
		again := string(appendAnnouncement(nil, key, at, origin))
		if again != msg {
			t.Fatalf("decoded %q, %v, %q from %q; re-encoded %q", key, at, origin, msg, again)
		}
	})
}

// An idle listening process costs its subscribed node one PING and one
// heartbeat a second: the heartbeat's echo stands in for a PING, and the
// loop wakes only when one of them is due. Pinging every fifth of a second
// of silence, it sent four PINGs a second.
func TestStreamIdleCost(t *testing.T) {
	srv := redistest.Standalone(t)
	newListeningCache(t, Options{Addrs: []string{srv.Addr()}}, hotPolicy)
	time.Sleep(time.Second) // past the first heartbeats
	ping0, pub0 := commandCalls(t, srv, "ping"), commandCalls(t, srv, "publish")
	const idle = 4 * time.Second
	time.Sleep(idle)
	pings, pubs := commandCalls(t, srv, "ping")-ping0, commandCalls(t, srv, "publish")-pub0
	t.Logf("idle %v: %d PINGs, %d PUBLISHes", idle, pings, pubs)
	if pings > 6 || pubs > 6 {
		t.Errorf("idle %v: %d PINGs and %d PUBLISHes, want about 4 of each", idle, pings, pubs)
	}
	if pubs < 3 {
		t.Errorf("idle %v: %d heartbeats, want about 4", idle, pubs)
	}
}
