package redis

import (
	"crypto/tls"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// TestTLSStandalone: the tier reads and writes over TLS with the server's
// CA, and without it fails in New with an error about the certificate.
func TestTLSStandalone(t *testing.T) {
	ca := newCA(t)
	srv := redistest.Standalone(t, redistest.Options{Access: redistest.Access{TLS: ca}})
	tr := exerciseTLS(t, ca, srv.Addr())
	if tr.Cluster() {
		t.Fatal("a standalone server taken for a Cluster")
	}
}

// TestTLSCluster: the same against a Cluster whose bus and replication use
// TLS too. The per-node clients and the readiness polls go over TLS: every
// replica becomes ready and takes reads.
func TestTLSCluster(t *testing.T) {
	ca := newCA(t)
	cl := redistest.Cluster(t, redistest.ClusterConfig{Access: redistest.Access{TLS: ca}})
	tr := exerciseTLS(t, ca, cl.Addrs()[0])
	if !tr.Cluster() {
		t.Fatal("a Cluster taken for a standalone server")
	}
	waitReady(t, tr, len(cl.Nodes()), 30*time.Second)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 300; i++ {
		if _, _, err := tr.Get(ctx, "k"+strconv.Itoa(i%30)); err != nil {
			t.Fatalf("Get: %v", err)
		}
	}
	replicaReads := uint64(0)
	for _, st := range tr.NodeStats() {
		if st.PollFailures != 0 || st.Polls == 0 {
			t.Errorf("node %s: %d polls, %d failed", st.Addr, st.Polls, st.PollFailures)
		}
		if !st.Primary {
			replicaReads += st.Reads
		}
	}
	if replicaReads == 0 {
		t.Fatalf("no read went to a replica: %+v", tr.NodeStats())
	}
}

func newCA(t *testing.T) *redistest.CA {
	t.Helper()
	ca, err := redistest.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// exerciseTLS connects to addr with and without ca, and returns the tier
// that trusts it after some reads and writes.
func exerciseTLS(t *testing.T, ca *redistest.CA, addr string) *Tier {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	_, logger := newLogBuffer()
	o := Options{Addrs: []string{addr}, TLS: ca.ClientTLS(), KeyPrefix: "tls:", ReadBudget: time.Second, WriteTimeout: 2 * time.Second,
		Logger: logger, Cluster: ClusterOptions{ReadinessInterval: 100 * time.Millisecond}}
	tr := newTier(t, o)
	for i := 0; i < 30; i++ {
		key := "k" + strconv.Itoa(i)
		if err := tr.Set(ctx, tier.Item{Key: key, Value: []byte("v" + key), TTL: time.Minute}); err != nil {
			t.Fatalf("Set: %v", err)
		}
		if v, ok, err := tr.Get(ctx, key); err != nil || !ok || string(v) != "v"+key {
			t.Fatalf("Get = %q, %v, %v", v, ok, err)
		}
	}
	v0, err := tr.Version(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Invalidate(ctx, "k0"); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
	if ok, err := tr.SetIfVersion(ctx, tier.Item{Key: "k0", Value: []byte("vk0"), TTL: time.Minute}, v0+1); err != nil || !ok {
		t.Fatalf("SetIfVersion: %v, %v", ok, err)
	}

	// A client that does not trust the CA: a certificate error, logged.
	logs, logger := newLogBuffer()
	for _, cfg := range []*tls.Config{{MinVersion: tls.VersionTLS12}, {RootCAs: newCA(t).Pool(), MinVersion: tls.VersionTLS12}} {
		bad := o
		bad.TLS, bad.Logger = cfg, logger
		if tr2, err := New(bad); err == nil {
			_ = tr2.Close()
			t.Fatal("New without the server's CA: no error")
		} else if !strings.Contains(err.Error(), "TLS failed") || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("New without the server's CA: %v, want a TLS certificate error", err)
		} else {
			t.Logf("without the CA: %v", err)
		}
	}
	if lines := logs.lines("redis tier: TLS failed"); len(lines) != 2 {
		t.Errorf("logged %d lines, want one per New: %q", len(lines), lines)
	}
	return tr
}
