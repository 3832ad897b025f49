// Package holdfastotel exports a holdfast.Cache's metrics as OpenTelemetry
// instruments and traces its slow reads as OpenTelemetry spans, beside (or
// instead of) package holdfastprom. It is a module of its own, so that the
// core module keeps no third-party requirement: an application that does
// not use OpenTelemetry never downloads it.
//
// Metrics: Register observes every measure of holdfast.Stats per namespace
// (attribute holdfast.namespace), each as the instrument named "holdfast."
// and the measure's name (observe.Metric), and the shared tier's health when
// the tier reports it (tier.HealthReporter, as package redis's do): whether
// it is up, its breaker, and each Redis Cluster node's (attributes
// server.address and holdfast.node.role), at each collection;
// loads are recorded as they end in the histogram holdfast.load.duration.
// Names follow the OpenTelemetry conventions: dotted, lower case, no unit or
// _total suffix, units in UCUM ("{read}", "By", "s").
//
// Traces: NewTracer is an observe.Tracer (holdfast.Options.Tracer). A read
// the hot tier answers makes no span; one that leaves it makes a
// holdfast.get span, a child of the caller's, with a child per stage of its
// flight: holdfast.shared_read (server.address names the Redis node in a
// Cluster), holdfast.lease_wait, holdfast.limiter, holdfast.load,
// holdfast.shared_write.
package holdfastotel

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/observe"
	"github.com/holdfast-dev/holdfast/tier"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/holdfast-dev/holdfast/holdfastotel"

// MaxHotKeyAttributes is how many hot keys per namespace are reported with
// their key as an attribute: keys are unbounded, a metric's series must not
// be.
const MaxHotKeyAttributes = 10

// Options configures Register.
type Options struct {
	// HotKeyNamespaces names the namespaces whose hottest keys are reported
	// with the key as an attribute (holdfast.hot_key.rate). None by
	// default: a key can be user input (a search query) that must not be
	// copied into the monitoring system.
	HotKeyNamespaces []string
}

// Exporter is a Cache's OpenTelemetry instruments; it is also the Cache's
// Recorder of load latencies.
type Exporter struct {
	cache    *holdfast.Cache
	duration metric.Float64Histogram
	reg      metric.Registration
	loadOpts sync.Map // namespace + "\x00" + outcome -> metric.RecordOption
}

var _ observe.Recorder = (*Exporter)(nil)

// Register creates c's instruments on mp's meter and becomes one of c's
// Recorders. It returns an error, and registers nothing lasting, when the
// meter refuses an instrument or c has an Exporter of this package already.
func Register(mp metric.MeterProvider, c *holdfast.Cache, o Options) (*Exporter, error) {
	m := mp.Meter(ScopeName)
	e := &Exporter{cache: c}
	var err error
	e.duration, err = m.Float64Histogram("holdfast.load.duration", metric.WithUnit("s"),
		metric.WithDescription("Loader call latency, by namespace and outcome (ok, not_found, error, timeout, panic)."),
		metric.WithExplicitBucketBoundaries(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5))
	if err != nil {
		return nil, fmt.Errorf("holdfastotel: %w", err)
	}
	// One instrument per measure of holdfast.Stats, in their order: a
	// time in seconds, as a float; a count or a level as an integer.
	var observers []metric.Observable
	for mt := range (holdfast.Stats{}).All() {
		name, unit, desc := "holdfast."+mt.Name, metric.WithUnit(mt.Unit), metric.WithDescription(mt.Help)
		var o metric.Observable
		switch {
		case mt.Unit == "ms":
			o, err = m.Float64ObservableGauge(name, metric.WithUnit("s"), desc)
		case mt.Gauge:
			o, err = m.Int64ObservableGauge(name, unit, desc)
		default:
			o, err = m.Int64ObservableCounter(name, unit, desc)
		}
		if err != nil {
			return nil, fmt.Errorf("holdfastotel: %s: %w", name, err)
		}
		observers = append(observers, o)
	}
	all := append([]metric.Observable(nil), observers...)
	nodes, err := newNodeInstruments(m)
	if err != nil {
		return nil, err
	}
	all = append(all, nodes.observables()...)
	g, err := newCacheGauges(m)
	if err != nil {
		return nil, err
	}
	all = append(all, g.observables()...)
	keyAttrs := map[string]bool{}
	for _, ns := range o.HotKeyNamespaces {
		keyAttrs[ns] = true
	}
	e.reg, err = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for name, s := range c.Stats() {
			set := metric.WithAttributeSet(attribute.NewSet(attribute.String("holdfast.namespace", name)))
			i := 0
			for mt, v := range s.All() {
				switch o := observers[i].(type) {
				case metric.Float64Observable:
					obs.ObserveFloat64(o, float64(v)*msToSeconds(mt), set)
				case metric.Int64Observable:
					obs.ObserveInt64(o, int64(v), set)
				}
				i++
			}
			g.observeHotKeys(obs, name, s.HotKeys(), keyAttrs[name])
		}
		if h, ok := c.SharedHealth(); ok {
			g.observeHealth(obs, h)
			nodes.observe(obs, h.Nodes)
		}
		return nil
	}, all...)
	if err != nil {
		return nil, fmt.Errorf("holdfastotel: %w", err)
	}
	if err := c.SetRecorder(e); err != nil {
		e.reg.Unregister()
		return nil, fmt.Errorf("holdfastotel: %w", err)
	}
	return e, nil
}

// ObserveLoad implements observe.Recorder.
func (e *Exporter) ObserveLoad(namespace string, d time.Duration, outcome string) {
	key := namespace + "\x00" + outcome
	opt, ok := e.loadOpts.Load(key)
	if !ok {
		opt, _ = e.loadOpts.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(
			attribute.String("holdfast.namespace", namespace), attribute.String("holdfast.outcome", outcome))))
	}
	e.duration.Record(context.Background(), d.Seconds(), opt.(metric.RecordOption))
}

// Unregister stops the instruments' observation. The Cache keeps the
// Exporter as its Recorder.
func (e *Exporter) Unregister() error { return e.reg.Unregister() }

// nodeInstruments are the per-node instruments.
type nodeInstruments struct {
	requests, failures, timeouts, reads, ejections metric.Int64ObservableCounter
	share                                          metric.Float64ObservableGauge
	state                                          metric.Int64ObservableGauge
}

func newNodeInstruments(m metric.Meter) (*nodeInstruments, error) {
	var n nodeInstruments
	var errs [8]error
	c := func(name, desc string, i int) metric.Int64ObservableCounter {
		var o metric.Int64ObservableCounter
		o, errs[i] = m.Int64ObservableCounter("holdfast.redis.node."+name, metric.WithUnit("{command}"), metric.WithDescription(desc))
		return o
	}
	n.requests = c("requests", "Commands sent to the node.", 0)
	n.failures = c("failures", "Commands to the node that failed, timeouts included.", 1)
	n.timeouts = c("timeouts", "Commands to the node past their budget.", 2)
	n.reads = c("reads", "Keys the node answered.", 3)
	n.ejections, errs[4] = m.Int64ObservableCounter("holdfast.redis.node.ejections", metric.WithUnit("{ejection}"), metric.WithDescription("Times the node was ejected."))
	n.share, errs[5] = m.Float64ObservableGauge("holdfast.redis.node.read_share", metric.WithUnit("1"), metric.WithDescription("The node's share of the reads of all nodes."))
	n.state, errs[6] = m.Int64ObservableGauge("holdfast.redis.node.state", metric.WithUnit("1"), metric.WithDescription("1 for the node's current state (attribute holdfast.node.state: ready, not_ready or ejected)."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("holdfastotel: %w", err)
		}
	}
	return &n, nil
}

func (n *nodeInstruments) observables() []metric.Observable {
	return []metric.Observable{n.requests, n.failures, n.timeouts, n.reads, n.ejections, n.share, n.state}
}

func (n *nodeInstruments) observe(obs metric.Observer, nodes []tier.Node) {
	for _, nd := range nodes {
		role := "replica"
		if nd.Primary {
			role = "primary"
		}
		attrs := []attribute.KeyValue{attribute.String("server.address", nd.Addr), attribute.String("holdfast.node.role", role)}
		set := metric.WithAttributeSet(attribute.NewSet(attrs...))
		obs.ObserveInt64(n.requests, int64(nd.Requests), set)
		obs.ObserveInt64(n.failures, int64(nd.Failures), set)
		obs.ObserveInt64(n.timeouts, int64(nd.Timeouts), set)
		obs.ObserveInt64(n.reads, int64(nd.Reads), set)
		obs.ObserveInt64(n.ejections, int64(nd.Ejections), set)
		obs.ObserveFloat64(n.share, nd.ReadShare, set)
		for _, st := range []string{"ready", "not_ready", "ejected"} {
			v := int64(0)
			if st == nd.State {
				v = 1
			}
			obs.ObserveInt64(n.state, v, metric.WithAttributeSet(attribute.NewSet(append(attrs, attribute.String("holdfast.node.state", st))...)))
		}
	}
}

// cacheGauges are the instruments beside Stats' measures: hot-key rates
// and the shared tier's health.
type cacheGauges struct {
	breakerState, up, down metric.Int64ObservableGauge
	hottest, hotKey        metric.Float64ObservableGauge
	opens, transitions     metric.Int64ObservableCounter
}

func newCacheGauges(m metric.Meter) (*cacheGauges, error) {
	var g cacheGauges
	var errs [7]error
	g.hottest, errs[2] = m.Float64ObservableGauge("holdfast.hottest_key.rate", metric.WithUnit("{read}/s"),
		metric.WithDescription("Estimated read rate of the namespace's hottest key, without the key."))
	g.hotKey, errs[3] = m.Float64ObservableGauge("holdfast.hot_key.rate", metric.WithUnit("{read}/s"),
		metric.WithDescription("Estimated read rate of the hottest keys (attribute holdfast.key), for the namespaces in Options.HotKeyNamespaces."))
	g.breakerState, errs[4] = m.Int64ObservableGauge("holdfast.redis.breaker.state", metric.WithUnit("1"),
		metric.WithDescription("1 for the shared tier's breaker's state (attribute holdfast.breaker.state: closed, open, half_open); open also before the tier has connected."))
	g.up, errs[0] = m.Int64ObservableGauge("holdfast.shared_tier.up", metric.WithUnit("1"),
		metric.WithDescription("1 while the shared tier is connected and serves calls; 0 while it is down (its breaker not closed) or not connected yet."))
	g.down, errs[1] = m.Int64ObservableGauge("holdfast.shared_tier.down", metric.WithUnit("1"),
		metric.WithDescription("1 for the reason the shared tier is down (attribute holdfast.reason: unreachable, timeout, auth_refused); all 0 while it is not down."))
	g.opens, errs[5] = m.Int64ObservableCounter("holdfast.redis.breaker.opens", metric.WithUnit("{open}"),
		metric.WithDescription("Times the shared tier's breaker opened."))
	g.transitions, errs[6] = m.Int64ObservableCounter("holdfast.redis.breaker.transitions", metric.WithUnit("{transition}"),
		metric.WithDescription("The shared tier's breaker's state changes."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("holdfastotel: %w", err)
		}
	}
	return &g, nil
}

func (g *cacheGauges) observables() []metric.Observable {
	return []metric.Observable{g.hottest, g.hotKey, g.breakerState, g.opens, g.transitions, g.up, g.down}
}

// observeHotKeys reports a namespace's hottest key's rate, and with
// withKeys the rates of its hottest keys by key.
func (g *cacheGauges) observeHotKeys(obs metric.Observer, ns string, keys []holdfast.HotKey, withKeys bool) {
	if keys == nil {
		return // the namespace does not detect hot keys
	}
	hottest := 0.0
	if len(keys) > 0 {
		hottest = keys[0].Rate // fastest first
	}
	obs.ObserveFloat64(g.hottest, hottest, metric.WithAttributes(attribute.String("holdfast.namespace", ns)))
	if !withKeys {
		return
	}
	for _, k := range keys[:min(len(keys), MaxHotKeyAttributes)] {
		obs.ObserveFloat64(g.hotKey, k.Rate, metric.WithAttributes(attribute.String("holdfast.namespace", ns), attribute.String("holdfast.key", k.Key)))
	}
}

// msToSeconds is the factor from a measure's unit to the seconds its
// instrument reports.
func msToSeconds(m observe.Metric) float64 {
	if m.Unit == "ms" {
		return 1e-3
	}
	return 1
}

// observeHealth reports the shared tier's health: up, the reason it is
// down, its breaker.
func (g *cacheGauges) observeHealth(obs metric.Observer, h tier.Health) {
	obs.ObserveInt64(g.up, one(h.Connected && !h.Down))
	for _, r := range []string{tier.ReasonUnreachable, tier.ReasonTimeout, tier.ReasonAuthRefused} {
		obs.ObserveInt64(g.down, one(h.Down && r == h.Reason), metric.WithAttributes(attribute.String("holdfast.reason", r)))
	}
	for _, st := range []string{"closed", "open", "half_open"} {
		obs.ObserveInt64(g.breakerState, one(st == h.Breaker.State), metric.WithAttributes(attribute.String("holdfast.breaker.state", st)))
	}
	obs.ObserveInt64(g.opens, int64(h.Breaker.Opens))
	obs.ObserveInt64(g.transitions, int64(h.Breaker.Transitions))
}

func one(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
