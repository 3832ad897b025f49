package redis

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// TestCluster: against a real 3 primaries + 3 replicas Cluster, the tier
// detects Cluster mode from one address, writes and reads keys spread over
// all slots in pipelined batches (MGETs per slot: a cross-slot MGET would be
// refused), and deletes across slots.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starting a Cluster takes seconds")
	}
	cl := redistest.Cluster(t)
	ctx := ctxT(t, 30*time.Second)
	tr := newTier(t, Options{Addrs: cl.Addrs()[:1], KeyPrefix: "t:"})
	if !tr.Cluster() {
		t.Fatal("Cluster not detected")
	}

	// Our slot function agrees with the server's.
	node := cl.Nodes()[0]
	for _, k := range []string{"foo", "t:ns:1", "{user1000}.following", "a{}b", "x{y}z{w}", "{", "}{x}"} {
		got, err := node.CLI(ctx, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Itoa(int(slot(k))); got != want {
			t.Errorf("slot(%q) = %s, CLUSTER KEYSLOT = %s", k, want, got)
		}
	}

	// And with rueidis's, for many odd keys: the Cluster builder panics on
	// a multi-key command whose keys' slots differ, so GetMany's grouping
	// must agree with it exactly.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab{}:{}")
	for i := 0; i < 20000; i++ {
		k := make([]byte, rng.IntN(12))
		for j := range k {
			k[j] = alphabet[rng.IntN(len(alphabet))]
		}
		cmd := tr.client.B().Get().Key(string(k)).Build()
		if got, want := slot(string(k)), cmd.Slot(); got != want {
			t.Fatalf("slot(%q) = %d, rueidis %d", k, got, want)
		}
	}

	const n = 300
	items := make([]tier.Item, n)
	keys := make([]string, 0, n+20)
	slots := map[uint16]bool{}
	for i := range items {
		k := fmt.Sprintf("ns:%d", i)
		items[i] = tier.Item{Key: k, Value: []byte("v" + k), TTL: time.Minute}
		keys = append(keys, k)
		slots[slot("t:"+k)] = true
	}
	for i := 0; i < 20; i++ {
		keys = append(keys, fmt.Sprintf("ns:missing-%d", i))
	}
	if len(slots) < 200 {
		t.Fatalf("test keys cover only %d slots", len(slots))
	}
	if err := tr.Set(ctx, items...); err != nil {
		t.Fatal(err)
	}
	// Every primary got some of the keys.
	for _, p := range cl.Primaries(ctx) {
		size, err := p.CLI(ctx, "DBSIZE")
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := strconv.Atoi(size); s == 0 {
			t.Fatalf("primary %s holds no keys", p.Addr())
		}
	}

	ls, err := tr.GetMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		switch {
		case l.Err != nil:
			t.Fatalf("key %s: %v", keys[i], l.Err)
		case i < n && (!l.Found || string(l.Value) != "v"+keys[i]):
			t.Fatalf("key %s: %+v", keys[i], l)
		case i >= n && l.Found:
			t.Fatalf("missing key %s found", keys[i])
		}
	}
	if v, found, err := tr.Get(ctx, "ns:7"); err != nil || !found || string(v) != "vns:7" {
		t.Fatalf("Get = %q, %v, %v", v, found, err)
	}

	if err := tr.Delete(ctx, keys...); err != nil {
		t.Fatal(err)
	}
	ls, err = tr.GetMany(ctx, keys[:n])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range ls {
		if l.Found || l.Err != nil {
			t.Fatalf("after Delete, key %s: %+v", keys[i], l)
		}
	}
	st := tr.Stats()
	if st.Errors != 0 || st.SetErrors != 0 || st.DeleteErrors != 0 || st.Hits != n+1 || st.Misses != 20+n {
		t.Fatalf("stats = %+v", st)
	}
}
