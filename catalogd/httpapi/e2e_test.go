package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/catalogd/internal/pgtest"
	"github.com/holdfast-dev/holdfast/catalogd/sqlstore"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// e2eHotTTL is the instances' hot-tier TTL: the documented bound on how
// long another instance serves a product after an update.
const e2eHotTTL = 300 * time.Millisecond

// instance is one catalogd as catalogd/main.go wires it with -redis and
// -postgres-dsn, on its own loopback port.
func instance(t *testing.T, dsn string, addrs []string) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.PostgreSQL, dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tier, err := redis.New(redis.Options{Addrs: addrs, KeyPrefix: "catalogd:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	cache, err := holdfast.New(holdfast.Options{Shared: tier, MaxConcurrentLoads: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	pol := httpapi.DefaultPolicies()
	for _, p := range []*holdfast.Policy{&pol.Product, &pol.Stock, &pol.List, &pol.Search} {
		p.Hot.TTL = e2eHotTTL
	}
	h, err := httpapi.NewHandler(httpapi.Config{Store: db, Cache: cache, Policies: pol, Logger: quiet, Registry: prometheus.NewRegistry(),
		Checks: []httpapi.Check{{Name: "redis", Func: func(ctx context.Context) error { _, _, err := tier.Get(ctx, "readyz"); return err }}}})
	if err != nil {
		t.Fatal(err)
	}
	s := httpapi.NewServer(h, quiet)
	if err := s.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	// Registered last, so it runs first: stop serving before the cache,
	// Redis and the database close.
	t.Cleanup(func() { s.Close(context.Background()) })
	return s.URL()
}

// TestEndToEndRedisClusterPostgres runs two instances on one PostgreSQL
// database and one Redis Cluster (3 primaries, 3 replicas): a value loaded by
// one is a shared hit for the other; an update on one is seen by the other
// within the hot-tier TTL; and when every Redis node is killed mid-load, no
// request gets a 5xx.
func TestEndToEndRedisClusterPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and a six-node Redis Cluster")
	}
	redistest.Require(t)
	dsn := pgtest.NewDatabase(t)
	cluster := redistest.Cluster(t)
	a := instance(t, dsn, cluster.Addrs())
	b := instance(t, dsn, cluster.Addrs())

	resp, body := call(t, "GET", a+"/v1/products/42", "")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Cache-Status"), "holdfast; fwd=miss; stored") {
		t.Fatalf("A's first read: %d %q %s", resp.StatusCode, resp.Header.Get("Cache-Status"), body)
	}
	// A writes to Redis after answering, and B may read a replica: wait
	// until every node serving the key has it.
	waitReplicated(t, cluster, "catalogd:product:42")
	resp, _ = call(t, "GET", b+"/v1/products/42", "")
	if cs := resp.Header.Get("Cache-Status"); !strings.HasPrefix(cs, "holdfast; hit; detail=shared") {
		t.Errorf("B's first read should come from Redis: %q", cs)
	}
	resp, body = call(t, "GET", b+"/readyz", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"redis":{"status":"ok"`) {
		t.Errorf("readyz with Redis up: %d %s", resp.StatusCode, body)
	}

	// An update on A, then B polls: B may serve its hot copy, at most for
	// the hot-tier TTL; after that it finds Redis invalidated and loads.
	upd := `{"name":"Updated On A","price_cents":777,"status":"active","category":"audio"}`
	resp, body = call(t, "PUT", a+"/v1/products/42", upd, "If-Match", `"1"`)
	if resp.StatusCode != 200 {
		t.Fatalf("update: %d %s", resp.StatusCode, body)
	}
	updated := time.Now()
	for {
		_, body = call(t, "GET", b+"/v1/products/42", "")
		if unmarshal[productBody](t, body).Product.Name == "Updated On A" {
			break
		}
		if time.Since(updated) > e2eHotTTL+time.Second {
			t.Fatalf("B still serves the old product %v after the update", time.Since(updated))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("B saw A's update after %v (bound: hot TTL %v)", time.Since(updated).Round(time.Millisecond), e2eHotTTL)

	// Warm ids 1..20 on both, then read them from 8 clients while every
	// Redis node is killed.
	ids := 20
	for _, base := range []string{a, b} {
		for id := 1; id <= ids; id++ {
			if resp, body := call(t, "GET", fmt.Sprintf("%s/v1/products/%d", base, id), ""); resp.StatusCode != 200 {
				t.Fatalf("warm %d: %d %s", id, resp.StatusCode, body)
			}
		}
	}
	var total, fivexx atomic.Int64
	var mu sync.Mutex
	details := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second}
	for g := range 8 {
		base := []string{a, b}[g%2]
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(fmt.Sprintf("%s/v1/products/%d", base, 1+i%ids))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				total.Add(1)
				if resp.StatusCode >= 500 {
					fivexx.Add(1)
				}
				mu.Lock()
				for _, m := range strings.Split(resp.Header.Get("Cache-Status"), ", ") {
					details[strings.Split(m, "; ttl=")[0]]++ // "holdfast; hit; detail=memory/tier-down"
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	for _, n := range cluster.Nodes() {
		n.Kill()
	}
	killed := time.Now()
	time.Sleep(2 * time.Second) // inside the stock window: hard 5 s + stale-if-error 5 s
	close(stop)
	wg.Wait()
	if n := fivexx.Load(); n != 0 {
		t.Errorf("%d of %d requests got a 5xx with Redis killed", n, total.Load())
	}
	t.Logf("%d requests, %d 5xx, Redis killed for the last %v; Cache-Status members: %v",
		total.Load(), fivexx.Load(), time.Since(killed).Round(time.Millisecond), details)

	resp, body = call(t, "GET", a+"/readyz", "")
	var ready struct {
		Status string
		Checks map[string]struct{ Status string }
	}
	json.Unmarshal(body, &ready)
	if resp.StatusCode != 200 || ready.Checks["redis"].Status != "down" {
		t.Errorf("readyz with Redis dead should be 200 and report it down: %d %s", resp.StatusCode, body)
	}
}

// waitReplicated waits until key can be read from every node of cl that
// serves its slot, replicas included (READONLY), failing after 5 s.
func waitReplicated(t *testing.T, cl *redistest.RedisCluster, key string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, n := range cl.Nodes() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		for {
			var got error
			c.Dedicated(func(d rueidis.DedicatedClient) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				d.Do(ctx, d.B().Readonly().Build())
				got = d.Do(ctx, d.B().Get().Key(key).Build()).Error()
				return nil
			})
			if got == nil || strings.HasPrefix(got.Error(), "MOVED") {
				break // has it, or does not serve the slot
			}
			if time.Now().After(deadline) {
				c.Close()
				t.Fatalf("%s not on %s after 5 s: %v", key, n.Addr(), got)
			}
			time.Sleep(5 * time.Millisecond)
		}
		c.Close()
	}
}
