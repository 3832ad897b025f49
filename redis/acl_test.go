package redis

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// What an ACL user must be granted for the tier limited to a key prefix:
//
//   - keys: the values, KeyPrefix + namespace + ":" + key, and hot copies,
//     KeyPrefix + "{tag}" + ...: ~prefix*; the siblings (version "{K}:v",
//     lease "{K}:lease", copy registry "{K}:c"): ~{prefix*;
//   - commands: reads and writes of those keys and the scripts that do
//     them (@read, @write, @scripting); the handshake (HELLO, AUTH,
//     READONLY, PING, CLIENT SETINFO: @connection); and, for a Cluster,
//     the slot map and the readiness polls: CLUSTER SLOTS and SHARDS (one
//     or the other, by server version), INFO; and TIME, which the shared
//     hot-key set's script asks for (the server's clock decides expiry);
//   - the invalidation stream: PUBLISH (from the invalidation script) and
//     SUBSCRIBE on channels under the prefix: +publish +subscribe &prefix*.
//
// aclUser returns that user's rules.
func aclUser(name, password, prefix string) string {
	return name + " on >" + password + " ~" + prefix + "* ~{" + prefix + "* resetchannels" +
		" -@all +@read +@write +@scripting +@connection +info +time +cluster|slots +cluster|shards +publish +subscribe &" + prefix + "*"
}

const (
	aclAdminPassword = "admin-secret"
	aclPassword      = "tier-secret"
	aclPrefix        = "pfx:"
)

// aclAccess is a server's access with the admin (default user) password
// and the tier's user.
func aclAccess() redistest.Access {
	return redistest.Access{Password: aclAdminPassword, Users: []string{aclUser("holdfast", aclPassword, aclPrefix)}}
}

// logBuffer is a slog.Logger's output, counted by line.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines that contain s.
func (b *logBuffer) lines(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(ln, s) {
			out = append(out, ln)
		}
	}
	return out
}

func newLogBuffer() (*logBuffer, *slog.Logger) {
	b := &logBuffer{}
	return b, slog.New(slog.NewTextHandler(b, nil))
}

// TestACLStandalone: the tier authenticated as an ACL user limited to its
// prefix does all it does, and writes nothing outside the prefix.
func TestACLStandalone(t *testing.T) {
	srv := redistest.Standalone(t, redistest.Options{Access: aclAccess()})
	exerciseACL(t, []*redistest.Server{srv}, false)
}

// TestACLCluster: the same in a Cluster, where the tier also reads the slot
// map and polls every node's readiness as that user: its replicas become
// ready and take reads, and hot keys' copies stay inside the prefix.
func TestACLCluster(t *testing.T) {
	cl := redistest.Cluster(t, redistest.ClusterConfig{Access: aclAccess()})
	exerciseACL(t, cl.Nodes(), true)
}

func exerciseACL(t *testing.T, nodes []*redistest.Server, cluster bool) {
	ctx := ctxT(t, 60*time.Second)
	logs, logger := newLogBuffer()
	o := Options{
		Addrs: []string{nodes[0].Addr()}, Username: "holdfast", Password: aclPassword, KeyPrefix: aclPrefix,
		ReadBudget: time.Second, WriteTimeout: 2 * time.Second, Logger: logger,
		Cluster: ClusterOptions{ReadinessInterval: 100 * time.Millisecond, TopologyInterval: 100 * time.Millisecond},
	}
	tr := newTier(t, o)
	if tr.Cluster() != cluster {
		t.Fatalf("Cluster() = %v, want %v", tr.Cluster(), cluster)
	}

	// Plain reads and writes.
	items := []tier.Item{
		{Key: "product:1", Value: []byte("one"), TTL: time.Minute},
		{Key: "product:2", Value: []byte("two"), TTL: time.Minute},
		{Key: "product:{user7}x", Value: []byte("tagged"), TTL: time.Minute},
	}
	if err := tr.Set(ctx, items...); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if v, ok, err := tr.Get(ctx, "product:1"); err != nil || !ok || string(v) != "one" {
		t.Fatalf("Get = %q, %v, %v", v, ok, err)
	}
	got, err := tr.GetMany(ctx, []string{"product:1", "product:2", "product:{user7}x", "product:none"})
	if err != nil || len(got) != 4 || !got[0].Found || !got[1].Found || !got[2].Found || got[3].Found {
		t.Fatalf("GetMany = %+v, %v", got, err)
	}
	if err := tr.Delete(ctx, "product:2"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, ok, err := tr.Get(ctx, "product:2"); err != nil || ok {
		t.Fatalf("Get after Delete: found %v, %v", ok, err)
	}

	// Versions, the guarded write, invalidation, leases, the hot-key set.
	for _, key := range []string{"product:1", "product:{user7}x"} {
		v0, err := tr.Version(ctx, key)
		if err != nil {
			t.Fatalf("Version %s: %v", key, err)
		}
		if err := tr.Invalidate(ctx, key); err != nil {
			t.Fatalf("Invalidate %s: %v", key, err)
		}
		if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("stale"), TTL: time.Minute}, v0); err != nil || ok {
			t.Fatalf("SetIfVersion with the old version: %v, %v (want refused)", ok, err)
		}
		v1, err := tr.Version(ctx, key)
		if err != nil || v1 != v0+1 {
			t.Fatalf("Version after Invalidate = %d, %v; want %d", v1, err, v0+1)
		}
		if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: key, Value: []byte("fresh"), TTL: time.Minute}, v1); err != nil || !ok {
			t.Fatalf("SetIfVersion: %v, %v", ok, err)
		}
		if v, ok, err := tr.Get(ctx, key); err != nil || !ok || string(v) != "fresh" {
			t.Fatalf("Get after SetIfVersion = %q, %v, %v", v, ok, err)
		}
		if ok, err := tr.Lease(ctx, key, "a", time.Minute); err != nil || !ok {
			t.Fatalf("Lease: %v, %v", ok, err)
		}
		if ok, err := tr.Lease(ctx, key, "b", time.Minute); err != nil || ok {
			t.Fatalf("second Lease: %v, %v (want refused)", ok, err)
		}
		if err := tr.Release(ctx, key, "a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if _, err := tr.ShareHot(ctx, "product", []string{"product:1"}, time.Minute, 10); err != nil {
		t.Fatalf("ShareHot: %v", err)
	}
	// A hot key: its copies (one per other primary in a Cluster) and
	// their registry are written too.
	hv, err := tr.Version(ctx, "product:hot")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := tr.SetSmearedIfVersion(ctx, tier.Item{Key: "product:hot", Value: []byte("hot"), TTL: time.Minute}, hv); err != nil || !ok {
		t.Fatalf("SetSmearedIfVersion: %v, %v", ok, err)
	}
	for i := 0; i < 20; i++ {
		if v, ok, err := tr.GetSmeared(ctx, "product:hot"); err != nil || !ok || string(v) != "hot" {
			t.Fatalf("GetSmeared = %q, %v, %v", v, ok, err)
		}
	}

	// The Cache over it, with leases: loads, hits, invalidation.
	c, err := holdfast.New(holdfast.Options{Shared: tr, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ns, err := c.Namespace("item", holdfast.Policy{TTL: time.Minute, Lease: holdfast.LeasePolicy{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	load := func(_ context.Context, key string) ([]byte, error) { return []byte("v-" + key), nil }
	for i := 0; i < 3; i++ {
		if res, err := ns.Get(ctx, "k1", load); err != nil || string(res.Value) != "v-k1" {
			t.Fatalf("Cache Get = %q, %v", res.Value, err)
		}
	}
	if err := ns.Invalidate(ctx, "k1"); err != nil {
		t.Fatalf("Cache Invalidate: %v", err)
	}

	if cluster {
		// Every node, replicas included, is polled as the ACL user and
		// becomes ready; no poll failed.
		waitReady(t, tr, len(nodes), 30*time.Second)
		replicas := 0
		for _, st := range tr.NodeStats() {
			if st.PollFailures != 0 {
				t.Errorf("node %s: %d poll failures", st.Addr, st.PollFailures)
			}
			if !st.Primary {
				replicas++
			}
		}
		if replicas != 3 {
			t.Fatalf("%d replicas in the map, want 3: %+v", replicas, tr.NodeStats())
		}
		// Let the topology refresh run a few times as the ACL user.
		time.Sleep(500 * time.Millisecond)
		for i := 0; i < 30; i++ {
			if _, _, err := tr.Get(ctx, "product:1"); err != nil {
				t.Fatalf("Get from a ready node: %v", err)
			}
		}
	}

	// The server denied the tier nothing, and every key is the tier's.
	var copies, siblings int
	for _, n := range nodes {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		denied, err := n.CLI(cctx, "ACL", "LOG")
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if denied != "" {
			t.Errorf("%s denied the tier:\n%s", n.Addr(), denied)
		}
		keys, err := n.CLI(cctx, "--raw", "KEYS", "*")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(keys) {
			switch {
			case strings.HasPrefix(k, aclPrefix+"{"):
				copies++
			case strings.HasPrefix(k, "{"+aclPrefix):
				siblings++
			case strings.HasPrefix(k, aclPrefix):
			default:
				t.Errorf("%s holds %q, outside the prefix %q", n.Addr(), k, aclPrefix)
			}
		}
	}
	if siblings == 0 {
		t.Error("no version, lease or registry key found: the test exercised less than it says")
	}
	if cluster && copies == 0 {
		t.Error("no copy of the hot key found: the test exercised less than it says")
	}
	if lines := logs.lines("redis tier"); len(lines) != 0 {
		t.Errorf("the tier logged: %q", lines)
	}

	// The ACL is in force: a tier whose prefix it does not cover is
	// refused, says why, and logs it once.
	bad := newTier(t, Options{Addrs: o.Addrs, Username: "holdfast", Password: aclPassword, KeyPrefix: "other:",
		ReadBudget: time.Second, WriteTimeout: 2 * time.Second, Logger: logger})
	for i := 0; i < 3; i++ {
		err := bad.Set(ctx, tier.Item{Key: "product:1", Value: []byte("x"), TTL: time.Minute})
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Set outside the ACL's keys: %v, want NOPERM", err)
		}
	}
	if lines := logs.lines("redis tier: permission failed"); len(lines) != 1 {
		t.Errorf("permission errors logged %d times, want once: %q", len(lines), lines)
	}

	if cluster {
		// A wrong password is named in New's error.
		o.Password = "wrong"
		o.Logger = slog.New(slog.DiscardHandler)
		if tr2, err := New(o); err == nil {
			_ = tr2.Close()
			t.Fatal("New with a wrong password: no error")
		} else if !strings.Contains(err.Error(), "authentication failed") {
			t.Fatalf("New with a wrong password: %v, want it to name authentication", err)
		}
	}
}

// TestACLWithoutTheStreamChannel: a user granted the keys but not the
// stream's channel still invalidates (the announcement is refused and
// logged, the version bumped and the value gone), and its refused
// subscription is logged too.
func TestACLWithoutTheStreamChannel(t *testing.T) {
	rules := "holdfast on >" + aclPassword + " ~" + aclPrefix + "* ~{" + aclPrefix + "* resetchannels" +
		" -@all +@read +@write +@scripting +@connection +info +time"
	srv := redistest.Standalone(t, redistest.Options{Access: redistest.Access{Password: aclAdminPassword, Users: []string{rules}}})
	ctx := ctxT(t, 30*time.Second)
	logs, logger := newLogBuffer()
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}, Username: "holdfast", Password: aclPassword, KeyPrefix: aclPrefix, Logger: logger})
	if err := tr.Set(ctx, tier.Item{Key: "product:1", Value: []byte("one"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Invalidate(ctx, "product:1"); err != nil {
		t.Fatalf("Invalidate with the channel refused: %v (the invalidation itself is allowed)", err)
	}
	if _, ok, err := tr.Get(ctx, "product:1"); err != nil || ok {
		t.Fatalf("after Invalidate: found %v, %v", ok, err)
	}
	if v, err := tr.Version(ctx, "product:1"); err != nil || v != 1 {
		t.Fatalf("version %d, %v; want 1", v, err)
	}
	if st := tr.Stats(); st.StreamRefused != 1 {
		t.Fatalf("StreamRefused %d, want 1", st.StreamRefused)
	}
	if l := logs.lines("announcing an invalidation"); len(l) != 1 {
		t.Fatalf("%d log lines of the refused announcement, want 1:\n%s", len(l), l)
	}
	// Another process, whose log has not had its line this minute yet.
	logs2, logger2 := newLogBuffer()
	tr2 := newTier(t, Options{Addrs: []string{srv.Addr()}, Username: "holdfast", Password: aclPassword, KeyPrefix: aclPrefix, Logger: logger2})
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); tr2.Listen(lctx, nopListener{}) }()
	deadline := time.Now().Add(10 * time.Second)
	for len(logs2.lines("permission failed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the refused SUBSCRIBE was not logged:\n%s", logs2.lines(""))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	t.Logf("logged: %s", logs2.lines("permission failed"))
}

type nopListener struct{}

func (nopListener) Invalidated(string, time.Time, string) {}
func (nopListener) Heard()                                {}
func (nopListener) Lost()                                 {}
