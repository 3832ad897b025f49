package holdfastotel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/holdfastotel"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/internal/testhook"
	"github.com/holdfast-dev/holdfast/tier"
)

func newCache(t *testing.T, o holdfast.Options) *holdfast.Cache {
	t.Helper()
	c, err := holdfast.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func namespace(t *testing.T, c *holdfast.Cache, name string, p holdfast.Policy) *holdfast.Namespace {
	t.Helper()
	ns, err := c.Namespace(name, p)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// script runs a mix of reads on a process that is traced and exported: hot
// and shared hits, misses, a stale answer, a lease wait behind another
// process's load, and a load error.
// healthTier is an inmem tier that reports a fixed health, the Redis tier's
// when its breaker probes a frozen Cluster.
type healthTier struct{ *inmem.Tier }

func (healthTier) Health() tier.Health {
	return tier.Health{Connected: true, Down: true, Reason: tier.ReasonTimeout,
		Breaker: tier.Breaker{State: "half_open", Opens: 3, Transitions: 5},
		Nodes:   []tier.Node{{Addr: "127.0.0.1:7000", Primary: true, State: "ready", Requests: 9, Reads: 7, ReadShare: 1}}}
}

func script(ctx context.Context, t *testing.T, o holdfast.Options) (*holdfast.Namespace, *holdfast.Cache) {
	shared := inmem.New(nil)
	o.Shared = &healthTier{Tier: shared}
	c := newCache(t, o)
	p := holdfast.Policy{TTL: time.Minute, SoftTTL: 200 * time.Millisecond, StaleIfError: time.Minute,
		Lease: holdfast.LeasePolicy{Enabled: true, Poll: 5 * time.Millisecond},
		Hot:   holdfast.HotPolicy{Threshold: -1}}
	ns := namespace(t, c, "product", p)
	var calls atomic.Int64
	ok := func(ctx context.Context, key string) ([]byte, error) {
		calls.Add(1)
		return []byte("v:" + key), nil
	}
	get := func(key string, l holdfast.Loader) holdfast.Result {
		t.Helper()
		res, err := ns.Get(ctx, key, l)
		if err != nil {
			t.Fatalf("Get(%q): %v", key, err)
		}
		waitFor(t, "the flight of "+key, func() bool { return !testhook.Loading(ns, key) })
		return res
	}
	get("p1", ok) // miss, load
	get("p1", ok) // hot hit: no span
	// Another process holds p2's lease and loads slowly: a lease wait.
	other := namespace(t, newCache(t, holdfast.Options{Shared: shared}), "product", p)
	gate := make(chan struct{})
	go other.Get(ctx, "p2", func(ctx context.Context, key string) ([]byte, error) {
		<-gate
		return []byte("v:p2"), nil
	})
	waitFor(t, "the other process's lease", func() bool { return other.Stats().Get("leases.taken") == 1 })
	// The other process's load ends once this one waits for it: on a busy
	// machine a timer could end it before this read began, and the read
	// would find the value instead of the lease.
	go func() {
		defer close(gate)
		for deadline := time.Now().Add(10 * time.Second); ns.Stats().Get("lease.waits") == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}()
	if res := get("p2", ok); string(res.Value) != "v:p2" {
		t.Fatalf("p2 after the lease wait: %q", res.Value)
	}
	// Stale: past p1's soft time the hot tier has dropped it, the shared
	// tier answers stale and a refresh runs.
	time.Sleep(250 * time.Millisecond)
	if res := get("p1", ok); res.Source != holdfast.SourceShared || res.Reason != holdfast.ReasonRevalidating || !res.Stale() {
		t.Fatalf("p1 past soft from %v for %v (stale %v), want shared, revalidating, stale", res.Source, res.Reason, res.Stale())
	}
	waitFor(t, "the refresh", func() bool { return ns.Stats().Get("loads") == 2 && !testhook.Loading(ns, "p1") })
	// A load error.
	if _, err := ns.Get(ctx, "p3", func(context.Context, string) ([]byte, error) { return nil, errors.New("db down") }); err == nil {
		t.Fatal("p3: no error from a failing loader")
	}
	return ns, c
}

func TestMetricsEqualStats(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	ns, c := script(context.Background(), t, holdfast.Options{})
	if _, err := holdfastotel.Register(mp, c, holdfastotel.Options{HotKeyNamespaces: []string{"product"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := holdfastotel.Register(mp, c, holdfastotel.Options{}); err == nil {
		t.Fatal("a second Exporter of the same cache was accepted")
	}
	ns.Get(context.Background(), "p4", func(context.Context, string) ([]byte, error) { return []byte("x"), nil })
	waitFor(t, "p4's flight", func() bool { return !testhook.Loading(ns, "p4") })

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	st := ns.Stats()
	got := map[string]int64{}
	var loads uint64
	var nodeReads, breakerOpens, halfOpen, up, downTimeout int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value("holdfast.namespace"); ok && v.AsString() == "product" {
						got[m.Name] = p.Value
					}
					switch m.Name {
					case "holdfast.redis.node.reads":
						nodeReads = p.Value
					case "holdfast.redis.breaker.opens":
						breakerOpens = p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					state, isState := p.Attributes.Value("holdfast.breaker.state")
					switch reason, _ := p.Attributes.Value("holdfast.reason"); {
					case m.Name == "holdfast.shared_tier.up":
						up = p.Value
					case m.Name == "holdfast.shared_tier.down" && reason.AsString() == tier.ReasonTimeout:
						downTimeout = p.Value
					}
					switch v, ok := p.Attributes.Value("holdfast.namespace"); {
					case isState && state.AsString() == "half_open":
						halfOpen = p.Value
					case ok && v.AsString() == "product":
						got[m.Name] = p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if v, _ := p.Attributes.Value("holdfast.namespace"); v.AsString() == "product" {
						loads += p.Count
					}
				}
			}
		}
	}
	checked := 0
	for m, v := range st.All() {
		if m.Unit == "ms" {
			continue // a float in seconds
		}
		name := "holdfast." + m.Name
		if g, ok := got[name]; !ok || uint64(g) != v {
			t.Errorf("%s = %d (reported %t), Stats %s = %d", name, g, ok, m.Name, v)
		}
		checked++
	}
	t.Logf("%d instruments equal Stats: reads %d, hot hits %d, loads %d, lease waits %d, stale %d, load errors %d",
		checked, st.Get("reads"), st.Get("hot.hits"), st.Get("loads"), st.Get("lease.waits"), st.Get("stale_served"), st.Get("load.errors"))
	for _, want := range []uint64{st.Get("reads"), st.Get("hot.hits"), st.Get("loads"), st.Get("lease.waits"), st.Get("stale_served"), st.Get("load.errors")} {
		if want == 0 {
			t.Fatalf("the script left a counter at 0: %+v", st)
		}
	}
	// Loads after Register were recorded in the histogram: p4's.
	if loads != 1 {
		t.Errorf("load histogram count %d, want 1 (the load after Register)", loads)
	}
	if nodeReads != 7 || breakerOpens != 3 || halfOpen != 1 || up != 0 || downTimeout != 1 {
		t.Errorf("node reads %d, breaker opens %d, half-open %d, up %d, down for a timeout %d; want 7, 3, 1, 0, 1", nodeReads, breakerOpens, halfOpen, up, downTimeout)
	}
	// Every capability has its series: the inmem tier coordinates but
	// does not smear.
	for name, want := range map[string]int64{"versions": 1, "leases": 1, "smearing": 0, "hot_sharing": 0, "stream": 1} {
		if got, ok := got["holdfast.capability."+name]; !ok || got != want {
			t.Errorf("holdfast.capability.%s = %d (reported %t), want %d", name, got, ok, want)
		}
	}
}

func TestSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tracer := holdfastotel.NewTracer(tp, holdfastotel.TraceOptions{KeyNamespaces: []string{"product"}})
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	ns, _ := script(ctx, t, holdfast.Options{Tracer: tracer})
	parent.End()

	type node struct {
		name  string
		attrs map[attribute.Key]attribute.Value
		kids  []string
	}
	spans := rec.Ended()
	byID := map[string]*node{}
	var reads []*node
	for _, s := range spans {
		n := &node{name: s.Name(), attrs: map[attribute.Key]attribute.Value{}}
		for _, a := range s.Attributes() {
			n.attrs[a.Key] = a.Value
		}
		byID[s.SpanContext().SpanID().String()] = n
		if s.Name() == "holdfast.get" {
			reads = append(reads, n)
		}
	}
	for _, s := range spans {
		if p := byID[s.Parent().SpanID().String()]; p != nil {
			p.kids = append(p.kids, s.Name())
			if s.Name() == "holdfast.get" && p.name != "request" {
				t.Errorf("a read span's parent is %q, want the caller's", p.name)
			}
		}
	}
	// Reads that left the hot tier: p1 (miss), p2 (lease wait), p1
	// (stale), p3 (error). The hot hit made none.
	var summary []string
	for _, r := range reads {
		slices.Sort(r.kids)
		summary = append(summary, r.attrs["holdfast.key"].AsString()+" "+r.attrs["holdfast.source"].AsString()+"/"+r.attrs["holdfast.reason"].AsString()+" ["+strings.Join(r.kids, " ")+"]")
	}
	t.Logf("read spans: %q", summary)
	want := []string{
		"p1 loaded/none [holdfast.limiter holdfast.load holdfast.shared_read holdfast.shared_write]",
		"p2 shared/none [holdfast.lease_wait holdfast.shared_read]",
		"p1 shared/revalidating [holdfast.limiter holdfast.load holdfast.shared_read holdfast.shared_write]",
		"p3 none/none [holdfast.limiter holdfast.load holdfast.shared_read]",
	}
	if len(summary) != len(want) {
		t.Fatalf("%d read spans, want %d: %q", len(summary), len(want), summary)
	}
	for i := range want {
		if summary[i] != want[i] {
			t.Errorf("read span %d: %q, want %q", i, summary[i], want[i])
		}
	}
	if reads[2].attrs["holdfast.stale"].AsBool() != true || reads[0].attrs["holdfast.namespace"].AsString() != "product" {
		t.Errorf("attributes: %v / %v", reads[2].attrs, reads[0].attrs)
	}
	if st := ns.Stats(); st.Get("hot.hits") == 0 {
		t.Fatal("no hot hit in the script")
	}
}

// A GetMany of 3 cold keys is one loader call for 3 keys; a Get, one for
// one.
func TestLoadCallsAndKeys(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c := newCache(t, holdfast.Options{})
	if _, err := holdfastotel.Register(mp, c, holdfastotel.Options{}); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, c, "product", holdfast.Policy{})
	ctx := context.Background()
	batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k] = []byte("v")
		}
		return out, nil
	}
	if _, errs := ns.GetMany(ctx, []string{"p1", "p2", "p3"}, batch); errs != nil {
		t.Fatal(errs)
	}
	if _, err := ns.Get(ctx, "p4", func(context.Context, string) ([]byte, error) { return []byte("v"), nil }); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value("holdfast.namespace"); ok && v.AsString() == "product" {
						got[m.Name] = p.Value
					}
				}
			}
		}
	}
	loads, keys := "holdfast.loads", "holdfast.load.keys"
	if got[loads] != 2 || got[keys] != 4 {
		t.Fatalf("%s = %d, %s = %d; want 2 loader calls for 4 keys", loads, got[loads], keys, got[keys])
	}
}
