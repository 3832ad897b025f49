// Package holdfastprom exports a holdfast.Cache's counters and load
// latencies as Prometheus metrics. It is a module of its own, so that only
// its importers require client_golang.
//
// The counters are not updated on the read path: the Exporter reads
// Cache.Stats at scrape time and reports each of its measures as a constant
// metric (named by PromName), so a hit costs no Prometheus call at all, and
// a measure added to holdfast.Stats is exported with no change here. Only load latency, which needs a histogram,
// is observed as it happens, through observe.Recorder, on the load path.
//
// One call sets it up:
//
//	if _, err := holdfastprom.Register(prometheus.DefaultRegisterer, cache); err != nil {
//		return err
//	}
//
// Keys never become label values unless asked for (Options.HotKeyLabels):
// a key is whatever the application built it from, user input included.
//
// A shared tier that reports its health (tier.HealthReporter, as package
// redis's tiers do) is exported too: holdfast_shared_tier_up, its breaker
// (holdfast_redis_breaker_*) and, in a Redis Cluster, each node's health
// (holdfast_redis_node_*), from before it first connects.
package holdfastprom

import (
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/observe"
	prom "github.com/prometheus/client_golang/prometheus"
)

// Exporter is a prometheus.Collector for one holdfast.Cache and the
// observe.Recorder that feeds its load-latency histogram.
type Exporter struct {
	loadSeconds *prom.HistogramVec
	metrics     []metric // one per measure of holdfast.Stats, in their order
	hotKeyRate  *prom.Desc
	hottestRate *prom.Desc
	health      *healthMetrics
	cache       *holdfast.Cache
	keyLabels   map[string]bool // namespaces in Options.HotKeyLabels
}

// Options configures an Exporter. The zero value means the defaults.
type Options struct {
	// HotKeyLabels names the namespaces whose hottest keys (at most
	// MaxHotKeyLabels each) are exported with the key as a label value, in
	// holdfast_hot_key_reads_per_second{namespace,key}. Default none.
	//
	// It is opt-in because a key is whatever the application built it
	// from. In a namespace keyed by user input (search queries, say) the
	// label values would copy what users typed into the monitoring system,
	// where everyone who reads the dashboards sees it and retention keeps
	// it for months, and every key that turns hot starts a series of its
	// own. Name only namespaces whose keys are neither user input nor
	// personal (product ids, say). Every namespace reports the rate of its
	// hottest key without the key, in
	// holdfast_hottest_key_reads_per_second{namespace}, which is enough to
	// alert on; which key it is belongs to an operator-only page.
	HotKeyLabels []string
}

var (
	_ prom.Collector   = (*Exporter)(nil)
	_ observe.Recorder = (*Exporter)(nil)
)

// metric is one measure of holdfast.Stats as a Prometheus metric.
type metric struct {
	desc  *prom.Desc
	kind  prom.ValueType
	scale float64 // from the measure's unit to the metric's
}

// PromName returns the name of the Prometheus metric that publishes the
// holdfast.Stats measure m: "holdfast_" and m's name with "." as "_", then
// "_seconds" for a time (published in seconds) and "_total" for a counter.
func PromName(m observe.Metric) string {
	name := "holdfast_" + strings.ReplaceAll(m.Name, ".", "_")
	if m.Unit == "ms" {
		name += "_seconds"
	}
	if !m.Gauge {
		name += "_total"
	}
	return name
}

// newMetrics describes every measure of holdfast.Stats, in their order.
func newMetrics() []metric {
	var ms []metric
	for m := range (holdfast.Stats{}).All() {
		mt := metric{desc: prom.NewDesc(PromName(m), m.Help, []string{"namespace"}, nil), kind: prom.CounterValue, scale: 1}
		if m.Gauge {
			mt.kind = prom.GaugeValue
		}
		if m.Unit == "ms" {
			mt.scale = 1e-3
		}
		ms = append(ms, mt)
	}
	return ms
}

// MaxHotKeyLabels is how many hot keys per namespace are exported as label
// values: keys are unbounded, a metric's series must not be.
const MaxHotKeyLabels = 10

// Register exports c's metrics to reg in one call: its counters and gauges,
// read at each scrape, and the latency of its loads (the Exporter becomes
// c's Recorder). It returns an error, and exports nothing, when c has a
// Recorder already (another exporter, say: a cache is exported once, never
// taken over silently) or when reg refuses the metrics (reg exports another
// cache's already: give each cache its own registry).
func Register(reg prom.Registerer, c *holdfast.Cache) (*Exporter, error) {
	return RegisterWith(reg, c, Options{})
}

// RegisterWith is Register with options.
func RegisterWith(reg prom.Registerer, c *holdfast.Cache, o Options) (*Exporter, error) {
	e := newExporter(c, o)
	if err := reg.Register(e); err != nil {
		return nil, fmt.Errorf("holdfastprom: register: %w", err)
	}
	if err := c.SetRecorder(e); err != nil {
		reg.Unregister(e)
		return nil, fmt.Errorf("holdfastprom: %w", err)
	}
	return e, nil
}

func newExporter(c *holdfast.Cache, o Options) *Exporter {
	keyLabels := map[string]bool{}
	for _, ns := range o.HotKeyLabels {
		keyLabels[ns] = true
	}
	return &Exporter{
		cache:     c,
		keyLabels: keyLabels,
		health:    newHealthMetrics(),
		metrics:   newMetrics(),
		loadSeconds: prom.NewHistogramVec(prom.HistogramOpts{
			Name: "holdfast_load_duration_seconds",
			Help: "Loader call latency by namespace and outcome (ok, not_found, error, timeout, panic).",
			// From a fast primary-key read to the default 5 s load timeout.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"namespace", "outcome"}),
		hotKeyRate: prom.NewDesc("holdfast_hot_key_reads_per_second",
			"Estimated read rate of the hottest keys, at most MaxHotKeyLabels per namespace, of the namespaces in Options.HotKeyLabels only.",
			[]string{"namespace", "key"}, nil),
		hottestRate: prom.NewDesc("holdfast_hottest_key_reads_per_second",
			"Estimated read rate of the namespace's hottest key (0 when none is hot); the key itself is not a label.",
			[]string{"namespace"}, nil),
	}
}

// ObserveLoad implements observe.Recorder.
func (e *Exporter) ObserveLoad(namespace string, d time.Duration, outcome string) {
	e.loadSeconds.WithLabelValues(namespace, outcome).Observe(d.Seconds())
}

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prom.Desc) {
	for _, m := range e.metrics {
		ch <- m.desc
	}
	ch <- e.hotKeyRate
	ch <- e.hottestRate
	e.health.describe(ch)
	e.loadSeconds.Describe(ch)
}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prom.Metric) {
	if c := e.cache; c != nil {
		for ns, st := range c.Stats() {
			i := 0
			for _, v := range st.All() {
				m := e.metrics[i]
				ch <- prom.MustNewConstMetric(m.desc, m.kind, float64(v)*m.scale, ns)
				i++
			}
			keys := st.HotKeys()
			if keys == nil {
				continue
			}
			hottest := 0.0
			if len(keys) > 0 {
				hottest = keys[0].Rate // fastest first
			}
			ch <- prom.MustNewConstMetric(e.hottestRate, prom.GaugeValue, hottest, ns)
			if !e.keyLabels[ns] {
				continue
			}
			for _, k := range keys[:min(len(keys), MaxHotKeyLabels)] {
				ch <- prom.MustNewConstMetric(e.hotKeyRate, prom.GaugeValue, k.Rate, ns, k.Key)
			}
		}
		if h, ok := c.SharedHealth(); ok {
			e.health.collect(ch, h)
		}
	}
	e.loadSeconds.Collect(ch)
}
