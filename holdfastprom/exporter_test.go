package holdfastprom

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Every measure of Stats is published, each under a name of its own, with
// the kind the measure says.
func TestEveryMeasureIsExported(t *testing.T) {
	reg, _, _ := exported(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, mf := range mfs {
		kinds[mf.GetName()] = mf.GetType().String()
	}
	names := map[string]bool{}
	for m := range (holdfast.Stats{}).All() {
		name := PromName(m)
		if names[name] {
			t.Errorf("two measures are published as %s", name)
		}
		names[name] = true
		want := "COUNTER"
		if m.Gauge {
			want = "GAUGE"
		}
		if got, ok := kinds[name]; !ok || got != want {
			t.Errorf("measure %s: %s published as %q, want a %s", m.Name, name, got, want)
		}
	}
	if len(names) < 50 {
		t.Errorf("only %d measures published", len(names))
	}
}

// exported returns a namespace "product" of a new Cache whose metrics are
// registered in reg.
func exported(t *testing.T) (reg *prom.Registry, exp *Exporter, ns *holdfast.Namespace) {
	t.Helper()
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	reg = prom.NewPedanticRegistry()
	if exp, err = Register(reg, c); err != nil {
		t.Fatal(err)
	}
	if ns, err = c.Namespace("product", holdfast.Policy{}); err != nil {
		t.Fatal(err)
	}
	return reg, exp, ns
}

// The counters are Stats': among them a GetMany of 3 cold keys is one
// loader call for 3 keys, beside a Get's one for one.
func TestExporterReportsCounters(t *testing.T) {
	reg, exp, ns := exported(t)
	load := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
	for range 3 {
		if _, err := ns.Get(context.Background(), "p1", load); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(ctx context.Context, keys []string) (map[string][]byte, error) {
		out := make(map[string][]byte, len(keys))
		for _, k := range keys {
			out[k] = []byte("v")
		}
		return out, nil
	}
	if _, errs := ns.GetMany(context.Background(), []string{"p2", "p3", "p4"}, batch); errs != nil {
		t.Fatal(errs)
	}
	want := `
# HELP holdfast_hot_hits_total Reads answered by the in-process hot tier.
# TYPE holdfast_hot_hits_total counter
holdfast_hot_hits_total{namespace="product"} 2
# HELP holdfast_load_keys_total Keys the loader calls asked for: one per Get's call, every key of a GetMany's batch.
# TYPE holdfast_load_keys_total counter
holdfast_load_keys_total{namespace="product"} 4
# HELP holdfast_loads_total Loader calls started; a GetMany's batch is one call.
# TYPE holdfast_loads_total counter
holdfast_loads_total{namespace="product"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "holdfast_hot_hits_total", "holdfast_loads_total", "holdfast_load_keys_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(exp, "holdfast_load_duration_seconds"); n != 1 {
		t.Fatalf("load latency series = %d, want 1", n)
	}
}

// One call exports a cache; a second exporter of the same cache, or a
// second cache in the same registry, is refused rather than silently
// replacing the first.
func TestRegisterRefusesASecondExport(t *testing.T) {
	a, _ := holdfast.New(holdfast.Options{})
	defer a.Close()
	b, _ := holdfast.New(holdfast.Options{})
	defer b.Close()
	reg := prom.NewPedanticRegistry()
	if _, err := Register(reg, a); err != nil {
		t.Fatal(err)
	}
	if _, err := Register(prom.NewPedanticRegistry(), a); err == nil {
		t.Error("a cache was exported twice")
	}
	if _, err := Register(reg, b); err == nil {
		t.Error("a second cache replaced the first in one registry")
	}
	if _, err := Register(prom.NewPedanticRegistry(), b); err != nil {
		t.Errorf("a second cache in its own registry: %v", err)
	}
}

// Keys are label values only in the namespaces named in
// Options.HotKeyLabels: a search namespace's keys are what users typed.
// Every namespace reports its hottest key's rate without the key.
func TestHotKeyLabelsAreOptIn(t *testing.T) {
	for _, o := range []Options{{}, {HotKeyLabels: []string{"product"}}} {
		c, err := holdfast.New(holdfast.Options{Shared: inmem.New(nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		reg := prom.NewPedanticRegistry()
		if _, err := RegisterWith(reg, c, o); err != nil {
			t.Fatal(err)
		}
		load := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
		for _, key := range []struct{ ns, key string }{{"product", "42"}, {"search", "alice's secret query"}} {
			ns, err := c.Namespace(key.ns, holdfast.Policy{})
			if err != nil {
				t.Fatal(err)
			}
			for range 300 {
				if _, err := ns.Get(context.Background(), key.key, load); err != nil {
					t.Fatal(err)
				}
			}
		}
		var out strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				out.WriteString(mf.GetName() + " " + m.String() + "\n")
			}
		}
		text := out.String()
		if strings.Contains(text, "secret") {
			t.Errorf("%+v: a search query reached a label value:\n%s", o, text)
		}
		if got, want := strings.Contains(text, `value:"42"`), len(o.HotKeyLabels) > 0; got != want {
			t.Errorf("%+v: product key 42 exported as a label: %v, want %v", o, got, want)
		}
		if n := testutil.CollectAndCount(reg, "holdfast_hottest_key_reads_per_second"); n != 2 {
			t.Errorf("%+v: %d hottest-key series, want one per namespace", o, n)
		}
	}
}

// doc/metrics.md names every metric a measure of Stats is published as, so
// that a measure added to the table is documented too.
func TestMetricsDocNamesEveryMeasure(t *testing.T) {
	b, err := os.ReadFile("../doc/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range (holdfast.Stats{}).All() {
		n++
		if !strings.Contains(string(b), "`"+PromName(m)+"`") {
			t.Errorf("doc/metrics.md does not name %s (measure %s)", PromName(m), m.Name)
		}
	}
	if n == 0 {
		t.Fatal("Stats has no measures")
	}
}
