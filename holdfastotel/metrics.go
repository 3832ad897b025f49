// Package holdfastotel exports a holdfast.Cache's metrics as OpenTelemetry
// instruments and traces its slow reads as OpenTelemetry spans, beside (or
// instead of) package holdfastprom. It is a module of its own, so that the
// core module keeps no third-party requirement: an application that does
// not use OpenTelemetry never downloads it.
//
// Metrics: Register observes every counter and gauge of holdfast.Stats per
// namespace (attribute holdfast.namespace), and the shared tier's health when
// the tier reports it (tier.HealthReporter, as package redis's do): whether
// it is up, its breaker, and each Redis Cluster node's (attributes
// server.address and holdfast.node.role), at each collection;
// loads are recorded as they end in the histogram holdfast.load.duration.
// Names follow the OpenTelemetry conventions: dotted, lower case, no unit or
// _total suffix, units in UCUM ("{read}", "By", "s").
//
// Traces: NewTracer is a observe.Tracer (holdfast.Options.Tracer). A read
// the hot tier answers makes no span; one that leaves it makes a
// holdfast.get span, a child of the caller's, with a child per stage of its
// flight: holdfast.shared_read (server.address names the Redis node in a
// Cluster), holdfast.lease_wait, holdfast.limiter, holdfast.load,
// holdfast.shared_write.
package holdfastotel

import (
	"github.com/holdfast-dev/holdfast/observe"

	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/tier"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/holdfast-dev/holdfast"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/holdfast-dev/holdfast/holdfastotel"

// instrument is one field of holdfast.Stats as an instrument.
type instrument struct {
	name, unit, desc string
	field            string // the Stats field it reports
	gauge            bool
}

func counter(name, unit, field, desc string) instrument {
	return instrument{name: "holdfast." + name, unit: unit, desc: desc, field: field}
}

func gauge(name, unit, field, desc string) instrument {
	return instrument{name: "holdfast." + name, unit: unit, desc: desc, field: field, gauge: true}
}

// instruments covers every uint64 field of holdfast.Stats (a test checks),
// but UnheardMillis, which is holdfast.stream.unheard in seconds.
var instruments = []instrument{
	counter("reads", "{read}", "Reads", "Reads (Get, and each key of GetMany)."),
	counter("hot.hits", "{read}", "HotHits", "Reads answered by the in-process hot tier."),
	counter("shared.hits", "{read}", "SharedHits", "Shared-tier reads that found a value (fresh or stale)."),
	counter("shared.misses", "{read}", "SharedMisses", "Shared-tier reads that found nothing (corrupt entries included)."),
	counter("shared.errors", "{read}", "SharedErrors", "Shared-tier reads that failed or ran past the read budget."),
	counter("shared.bypassed", "{call}", "SharedBypassed", "Shared-tier calls skipped by an open breaker, or reads skipped while the tier answered nothing."),
	counter("shared.set_errors", "{write}", "SharedSetErrors", "Failed shared-tier writes (never a failed read)."),
	counter("shared.delete_errors", "{delete}", "SharedDelErrors", "Failed shared-tier deletes."),
	counter("corrupt_entries", "{entry}", "Corrupt", "Stored bytes that failed to decode, read as misses."),
	counter("loads", "{load}", "Loads", "Loader calls started; a GetMany's batch is one call."),
	counter("load.keys", "{key}", "KeysLoaded", "Keys the loader calls asked for: one per Get's call, every key of a GetMany's batch."),
	counter("load.errors", "{load}", "LoadErrors", "Loader calls that failed, timed out or panicked."),
	counter("load.not_found", "{key}", "LoadNotFound", "Keys the loader found missing (ErrNotFound, or left out of a batch's map)."),
	counter("load.timeouts", "{load}", "LoadTimeouts", "Loader calls that had not returned at LoadTimeout."),
	counter("coalesced", "{read}", "Coalesced", "Reads that waited for another read's load."),
	counter("refreshes", "{refresh}", "Refreshes", "Background refreshes started."),
	counter("stale_served", "{read}", "StaleServed", "Values served between soft and hard time."),
	counter("stale_on_error", "{read}", "StaleOnError", "Values served past hard time because fresh data could not be had."),
	counter("stale_on_slow_load", "{read}", "StaleOnSlowLoad", "Values served past hard time, within stale-if-error, because their load outlasted SlowLoadGrace."),
	counter("memory_on_slow_read", "{read}", "MemoryOnSlowRead", "Values served from last-known-good because the shared tier had not answered within the slow-read delay (SlowReadGrace)."),
	counter("memory_for_busy_node", "{read}", "MemoryForBusyNode", "Fresh values served from last-known-good instead of reading a shared-tier node that carried more than its share of reads."),
	counter("local_served", "{read}", "LocalServed", "Last-known-good values served while the shared tier was down."),
	counter("negative_hits", "{read}", "NegativeHits", "Cached not-found answers served."),
	counter("load.rejected", "{load}", "Rejected", "Loads the load limiter rejected that readers waited for."),
	counter("refresh.rejected", "{refresh}", "RefreshesRejected", "Background refreshes the load limiter refused; their readers had been answered already."),
	counter("overloaded", "{read}", "Overloaded", "Reads that failed with ErrOverloaded."),
	counter("invalidations", "{key}", "Invalidations", "Keys invalidated."),
	counter("dropped_stale_sets", "{write}", "DroppedStaleSets", "Loads finished after an invalidation of their key, not stored."),
	counter("too_large", "{key}", "TooLarge", "Keys or values refused for their size."),
	gauge("pending_deletes", "{key}", "PendingDeletes", "Invalidations waiting to be replayed on the shared tier."),
	counter("replayed_deletes", "{key}", "ReplayedDeletes", "Invalidations replayed on the shared tier after it recovered."),
	counter("dropped_deletes", "{key}", "DroppedDeletes", "Invalidations that did not fit in the replay queue."),
	counter("leases.taken", "{load}", "LeasesTaken", "Loads made holding the key's lease."),
	counter("lease.waits", "{read}", "LeaseWaits", "Reads that waited for another process's load under its lease."),
	counter("lease.gave_up", "{read}", "LeaseGaveUp", "Lease waits that ran out and loaded instead."),
	counter("error_backoffs", "{read}", "ErrorBackoffs", "Reads answered without a load, stale or with the last load's error, because the key's loads were failing and its retry was not due."),
	counter("smeared.reads", "{read}", "SmearedReads", "Shared-tier reads of hot keys sent to one of their copies."),
	counter("smeared.writes", "{write}", "SmearedWrites", "Shared-tier writes of hot keys to all their copies."),
	counter("superseded_reads", "{read}", "Superseded", "Shared-tier values older than this process's own invalidation, read as misses."),
	gauge("shared_hot_keys", "{key}", "SharedHotKeys", "Keys in the hot set shared by every process, as last fetched."),
	gauge("hot.entries", "{entry}", "HotEntries", "Entries in the hot tier."),
	gauge("hot.bytes", "By", "HotBytes", "Memory the hot tier's entries take, as Hot.MaxBytes counts it."),
	gauge("last_known_good.entries", "{entry}", "LastKnownGoodKeys", "Entries in the last-known-good store."),
	counter("invalidations.sent", "{key}", "InvalidationsSent", "Keys invalidated here and announced to every process."),
	counter("invalidations.heard", "{key}", "InvalidationsHeard", "Announcements of this namespace's invalidations heard, own included."),
	counter("invalidations.applied", "{key}", "InvalidationsApplied", "Other processes' announcements that dropped or demoted a copy held here."),
	counter("revalidated", "{entry}", "Revalidated", "Hot copies checked against the shared tier after the stream was heard again."),
	counter("revalidation.dropped", "{entry}", "RevalidationDropped", "Hot copies the check dropped."),
	counter("warm_start.keys", "{key}", "WarmStartKeys", "Keys the warm start put in the hot tier."),
	counter("warm_start.bytes", "By", "WarmStartBytes", "Bytes of the values the warm start put in the hot tier."),
	counter("lifetimes.set", "{value}", "LifetimesSet", "Loaded values whose loader set their own lifetime."),
	counter("lifetimes.clamped", "{value}", "LifetimesClamped", "Loader-set lifetimes clamped into Policy.Lifetime."),
}

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
	observers := make([]metric.Int64Observable, len(instruments))
	all := make([]metric.Observable, 0, len(instruments)+8)
	for i, in := range instruments {
		if in.gauge {
			observers[i], err = m.Int64ObservableGauge(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		} else {
			observers[i], err = m.Int64ObservableCounter(in.name, metric.WithUnit(in.unit), metric.WithDescription(in.desc))
		}
		if err != nil {
			return nil, fmt.Errorf("holdfastotel: %s: %w", in.name, err)
		}
		all = append(all, observers[i])
	}
	unheard, err := m.Float64ObservableGauge("holdfast.stream.unheard", metric.WithUnit("s"),
		metric.WithDescription("Time since the invalidation stream was last heard; 0 while it is heard."))
	if err != nil {
		return nil, fmt.Errorf("holdfastotel: %w", err)
	}
	all = append(all, unheard)
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
			v := reflect.ValueOf(s)
			for i, in := range instruments {
				obs.ObserveInt64(observers[i], int64(v.FieldByName(in.field).Uint()), set)
			}
			obs.ObserveFloat64(unheard, float64(s.UnheardMillis)/1000, set)
			g.observeCapabilities(obs, name, s.Capabilities)
		}
		g.observeCache(obs, c, keyAttrs)
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

// InstrumentName returns the name of the instrument that reports the Stats
// field named field, or "".
func InstrumentName(field string) string {
	for _, in := range instruments {
		if in.field == field {
			return in.name
		}
	}
	return ""
}

// cacheGauges are the instruments beside Stats': capabilities, loads in
// flight, hot-key rates, the breaker.
type cacheGauges struct {
	capability, inFlight, breakerState metric.Int64ObservableGauge
	up, down                           metric.Int64ObservableGauge
	hottest, hotKey                    metric.Float64ObservableGauge
	opens, transitions                 metric.Int64ObservableCounter
}

func newCacheGauges(m metric.Meter) (*cacheGauges, error) {
	var g cacheGauges
	var errs [9]error
	g.capability, errs[0] = m.Int64ObservableGauge("holdfast.capability", metric.WithUnit("1"),
		metric.WithDescription("1 when the namespace uses the shared tier's capability (attribute holdfast.capability: versions, leases, smearing, hot_sharing, stream, leveling), else 0."))
	g.inFlight, errs[1] = m.Int64ObservableGauge("holdfast.loads.in_flight", metric.WithUnit("{load}"),
		metric.WithDescription("Loader calls holding a slot of the cache-wide load limit."))
	g.hottest, errs[2] = m.Float64ObservableGauge("holdfast.hottest_key.rate", metric.WithUnit("{read}/s"),
		metric.WithDescription("Estimated read rate of the namespace's hottest key, without the key."))
	g.hotKey, errs[3] = m.Float64ObservableGauge("holdfast.hot_key.rate", metric.WithUnit("{read}/s"),
		metric.WithDescription("Estimated read rate of the hottest keys (attribute holdfast.key), for the namespaces in Options.HotKeyNamespaces."))
	g.breakerState, errs[4] = m.Int64ObservableGauge("holdfast.redis.breaker.state", metric.WithUnit("1"),
		metric.WithDescription("1 for the shared tier's breaker's state (attribute holdfast.breaker.state: closed, open, half_open); open also before the tier has connected."))
	g.up, errs[7] = m.Int64ObservableGauge("holdfast.shared_tier.up", metric.WithUnit("1"),
		metric.WithDescription("1 while the shared tier is connected and serves calls; 0 while it is down (its breaker not closed) or not connected yet."))
	g.down, errs[8] = m.Int64ObservableGauge("holdfast.shared_tier.down", metric.WithUnit("1"),
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
	return []metric.Observable{g.capability, g.inFlight, g.hottest, g.hotKey, g.breakerState, g.opens, g.transitions, g.up, g.down}
}

func (g *cacheGauges) observeCapabilities(obs metric.Observer, ns string, cp holdfast.Capabilities) {
	for _, c := range []struct {
		name string
		on   bool
	}{{"versions", cp.Versions}, {"leases", cp.Leases}, {"smearing", cp.Smearing}, {"hot_sharing", cp.HotSharing}, {"stream", cp.Stream}, {"leveling", cp.Leveling}} {
		v := int64(0)
		if c.on {
			v = 1
		}
		obs.ObserveInt64(g.capability, v, metric.WithAttributes(attribute.String("holdfast.namespace", ns), attribute.String("holdfast.capability", c.name)))
	}
}

func (g *cacheGauges) observeCache(obs metric.Observer, c *holdfast.Cache, keyAttrs map[string]bool) {
	obs.ObserveInt64(g.inFlight, int64(c.LoadsInFlight()))
	for ns, keys := range c.HotKeys() {
		hottest := 0.0
		if len(keys) > 0 {
			hottest = keys[0].Rate // fastest first
		}
		obs.ObserveFloat64(g.hottest, hottest, metric.WithAttributes(attribute.String("holdfast.namespace", ns)))
		if !keyAttrs[ns] {
			continue
		}
		for _, k := range keys[:min(len(keys), MaxHotKeyAttributes)] {
			obs.ObserveFloat64(g.hotKey, k.Rate, metric.WithAttributes(attribute.String("holdfast.namespace", ns), attribute.String("holdfast.key", k.Key)))
		}
	}
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
