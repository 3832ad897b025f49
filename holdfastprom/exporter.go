// Package holdfastprom exports a holdfast.Cache's counters and load
// latencies as Prometheus metrics. It is a module of its own, so that only
// its importers require client_golang.
//
// The counters are not updated on the read path: the Exporter reads
// Cache.Stats at scrape time and reports them as constant metrics, so a hit
// costs no Prometheus call at all. Only load latency, which needs a histogram,
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
	"github.com/holdfast-dev/holdfast/observe"

	"fmt"
	"time"

	"github.com/holdfast-dev/holdfast"
	prom "github.com/prometheus/client_golang/prometheus"
)

// Exporter is a prometheus.Collector for one holdfast.Cache and the
// observe.Recorder that feeds its load-latency histogram.
type Exporter struct {
	loadSeconds *prom.HistogramVec
	inFlight    *prom.Desc
	hotKeyRate  *prom.Desc
	hottestRate *prom.Desc
	capability  *prom.Desc
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

// metric is one holdfast.Stats field as a Prometheus metric.
type metric struct {
	desc  *prom.Desc
	kind  prom.ValueType
	value func(holdfast.Stats) uint64
}

func counter(name, help string, v func(holdfast.Stats) uint64) metric {
	return metric{prom.NewDesc("holdfast_"+name, help, []string{"namespace"}, nil), prom.CounterValue, v}
}

func gauge(name, help string, v func(holdfast.Stats) uint64) metric {
	return metric{prom.NewDesc("holdfast_"+name, help, []string{"namespace"}, nil), prom.GaugeValue, v}
}

// metrics lists every field of holdfast.Stats; the README's metrics table
// is this list.
var metrics = []metric{
	counter("reads_total", "Reads (Get, and each key of GetMany); hot_hits_total over it is the hot tier's share.", func(s holdfast.Stats) uint64 { return s.Reads }),
	counter("hot_hits_total", "Reads answered by the in-process hot tier.", func(s holdfast.Stats) uint64 { return s.HotHits }),
	counter("shared_hits_total", "Shared-tier reads that found a value (fresh or stale).", func(s holdfast.Stats) uint64 { return s.SharedHits }),
	counter("shared_misses_total", "Shared-tier reads that found nothing (corrupt entries included).", func(s holdfast.Stats) uint64 { return s.SharedMisses }),
	counter("shared_errors_total", "Shared-tier reads that failed or ran past the read budget.", func(s holdfast.Stats) uint64 { return s.SharedErrors }),
	counter("shared_bypassed_total", "Shared-tier calls skipped because the tier's breaker was open, or reads skipped while the tier answered nothing.", func(s holdfast.Stats) uint64 { return s.SharedBypassed }),
	counter("shared_set_errors_total", "Failed shared-tier writes; they never fail a read.", func(s holdfast.Stats) uint64 { return s.SharedSetErrors }),
	counter("shared_delete_errors_total", "Failed shared-tier deletes (invalidations).", func(s holdfast.Stats) uint64 { return s.SharedDelErrors }),
	counter("corrupt_entries_total", "Stored bytes that failed to decode and were read as misses.", func(s holdfast.Stats) uint64 { return s.Corrupt }),
	counter("loads_total", "Loader calls started; a GetMany's batch is one call.", func(s holdfast.Stats) uint64 { return s.Loads }),
	counter("keys_loaded_total", "Keys the loader calls asked for: one per Get's call, every key of a GetMany's batch.", func(s holdfast.Stats) uint64 { return s.KeysLoaded }),
	counter("load_errors_total", "Loader calls that failed, timed out or panicked.", func(s holdfast.Stats) uint64 { return s.LoadErrors }),
	counter("load_not_found_total", "Keys the loader found missing (then cached as negative entries, unless NegativeTTL is negative).", func(s holdfast.Stats) uint64 { return s.LoadNotFound }),
	counter("coalesced_total", "Reads that waited for another read's fetch instead of loading.", func(s holdfast.Stats) uint64 { return s.Coalesced }),
	counter("refreshes_total", "Background refreshes started (stale-while-revalidate and early refresh).", func(s holdfast.Stats) uint64 { return s.Refreshes }),
	counter("stale_served_total", "Values served between their soft and hard time while a refresh ran.", func(s holdfast.Stats) uint64 { return s.StaleServed }),
	counter("stale_on_error_total", "Values served past their hard time because fresh data could not be had.", func(s holdfast.Stats) uint64 { return s.StaleOnError }),
	counter("stale_on_slow_load_total", "Values served past their hard time, within stale-if-error, because their load outlasted SlowLoadGrace.", func(s holdfast.Stats) uint64 { return s.StaleOnSlowLoad }),
	counter("memory_on_slow_read_total", "Values served from last-known-good because the shared tier had not answered within the slow-read delay (SlowReadGrace).", func(s holdfast.Stats) uint64 { return s.MemoryOnSlowRead }),
	counter("memory_for_busy_node_total", "Fresh values served from last-known-good instead of reading a shared-tier node that carried more than its share of reads.", func(s holdfast.Stats) uint64 { return s.MemoryForBusyNode }),
	counter("local_served_total", "Values served from last-known-good while the shared tier was failing.", func(s holdfast.Stats) uint64 { return s.LocalServed }),
	counter("negative_hits_total", "Cached not-found answers served.", func(s holdfast.Stats) uint64 { return s.NegativeHits }),
	counter("load_rejected_total", "Loads rejected by the load limiter that readers waited for: each reader got a stale value or ErrOverloaded.", func(s holdfast.Stats) uint64 { return s.Rejected }),
	counter("refresh_rejected_total", "Background refreshes the load limiter refused; their readers had been answered already.", func(s holdfast.Stats) uint64 { return s.RefreshesRejected }),
	counter("overloaded_total", "Reads that failed with ErrOverloaded: rejected, nothing stale to serve.", func(s holdfast.Stats) uint64 { return s.Overloaded }),
	counter("invalidations_total", "Keys invalidated.", func(s holdfast.Stats) uint64 { return s.Invalidations }),
	counter("dropped_stale_sets_total", "Loads that finished after their key was invalidated and were not stored.", func(s holdfast.Stats) uint64 { return s.DroppedStaleSets }),
	counter("too_large_total", "Keys or values refused for their size.", func(s holdfast.Stats) uint64 { return s.TooLarge }),
	gauge("pending_deletes", "Invalidations waiting to be replayed on the shared tier.", func(s holdfast.Stats) uint64 { return s.PendingDeletes }),
	counter("replayed_deletes_total", "Invalidations replayed on the shared tier after it recovered.", func(s holdfast.Stats) uint64 { return s.ReplayedDeletes }),
	counter("dropped_deletes_total", "Invalidations that did not fit in the replay queue.", func(s holdfast.Stats) uint64 { return s.DroppedDeletes }),
	counter("leases_taken_total", "Loads made holding the key's lease (cross-process coalescing).", func(s holdfast.Stats) uint64 { return s.LeasesTaken }),
	counter("lease_waits_total", "Reads that waited for another process's load under its lease.", func(s holdfast.Stats) uint64 { return s.LeaseWaits }),
	counter("lease_gave_up_total", "Lease waits that ran out and loaded instead.", func(s holdfast.Stats) uint64 { return s.LeaseGaveUp }),
	counter("smeared_reads_total", "Shared-tier reads of hot keys sent to one of their copies on another node.", func(s holdfast.Stats) uint64 { return s.SmearedReads }),
	counter("smeared_writes_total", "Shared-tier writes of hot keys to every one of their copies.", func(s holdfast.Stats) uint64 { return s.SmearedWrites }),
	counter("superseded_reads_total", "Shared-tier values older than this process's own invalidation of their key, read as misses.", func(s holdfast.Stats) uint64 { return s.Superseded }),
	counter("load_timeouts_total", "Loader calls that had not returned at LoadTimeout; their readers were answered then.", func(s holdfast.Stats) uint64 { return s.LoadTimeouts }),
	counter("error_backoffs_total", "Reads answered without a load, stale or with the last load's error, because the key's loads were failing and its retry was not due.", func(s holdfast.Stats) uint64 { return s.ErrorBackoffs }),
	counter("invalidations_sent_total", "Keys this process invalidated in the shared tier, each announced to every process (invalidation stream).", func(s holdfast.Stats) uint64 { return s.InvalidationsSent }),
	counter("invalidations_heard_total", "Announcements of this namespace's invalidations heard on the stream, this process's own included.", func(s holdfast.Stats) uint64 { return s.InvalidationsHeard }),
	counter("invalidations_applied_total", "Other processes' announcements that dropped or demoted a copy held here.", func(s holdfast.Stats) uint64 { return s.InvalidationsApplied }),
	counter("revalidated_total", "Hot-tier copies checked against the shared tier after the stream was not heard for a while.", func(s holdfast.Stats) uint64 { return s.Revalidated }),
	counter("revalidation_dropped_total", "Hot-tier copies the check dropped: the shared tier no longer held the same load.", func(s holdfast.Stats) uint64 { return s.RevalidationDropped }),
	gauge("stream_unheard_seconds", "Seconds since the invalidation stream was last heard; 0 while it is heard.", func(s holdfast.Stats) uint64 { return s.UnheardMillis / 1000 }),
	counter("warm_start_keys_total", "Keys the warm start put in the hot tier from the shared hot set.", func(s holdfast.Stats) uint64 { return s.WarmStartKeys }),
	counter("warm_start_bytes_total", "Bytes of the values the warm start put in the hot tier.", func(s holdfast.Stats) uint64 { return s.WarmStartBytes }),
	counter("lifetimes_set_total", "Loaded values whose loader set their own lifetime (holdfast.SetLifetime).", func(s holdfast.Stats) uint64 { return s.LifetimesSet }),
	counter("lifetimes_clamped_total", "Loader-set lifetimes outside the namespace's Policy.Lifetime bounds, clamped into them.", func(s holdfast.Stats) uint64 { return s.LifetimesClamped }),
	gauge("shared_hot_keys", "Keys in the hot set shared by every process, as last fetched (Policy.Hot.Share).", func(s holdfast.Stats) uint64 { return s.SharedHotKeys }),
	gauge("hot_entries", "Entries in the hot tier.", func(s holdfast.Stats) uint64 { return s.HotEntries }),
	gauge("hot_bytes", "Memory the hot tier's entries take, as Hot.MaxBytes counts it.", func(s holdfast.Stats) uint64 { return s.HotBytes }),
	gauge("last_known_good_entries", "Entries in the last-known-good store.", func(s holdfast.Stats) uint64 { return s.LastKnownGoodKeys }),
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
		loadSeconds: prom.NewHistogramVec(prom.HistogramOpts{
			Name: "holdfast_load_duration_seconds",
			Help: "Loader call latency by namespace and outcome (ok, not_found, error, timeout, panic).",
			// From a fast primary-key read to the default 5 s load timeout.
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"namespace", "outcome"}),
		inFlight: prom.NewDesc("holdfast_loads_in_flight", "Loader calls holding a slot of the cache-wide load limit.", nil, nil),
		capability: prom.NewDesc("holdfast_capability",
			"1 when the namespace uses the shared tier's capability (versions, leases, smearing, hot_sharing, stream, leveling), else 0.",
			[]string{"namespace", "capability"}, nil),
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
	for _, m := range metrics {
		ch <- m.desc
	}
	ch <- e.inFlight
	ch <- e.hotKeyRate
	ch <- e.hottestRate
	ch <- e.capability
	e.health.describe(ch)
	e.loadSeconds.Describe(ch)
}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prom.Metric) {
	if c := e.cache; c != nil {
		for ns, st := range c.Stats() {
			for _, m := range metrics {
				ch <- prom.MustNewConstMetric(m.desc, m.kind, float64(m.value(st)), ns)
			}
			cp := st.Capabilities
			for _, c := range []struct {
				name string
				on   bool
			}{{"versions", cp.Versions}, {"leases", cp.Leases}, {"smearing", cp.Smearing}, {"hot_sharing", cp.HotSharing}, {"stream", cp.Stream}, {"leveling", cp.Leveling}} {
				v := 0.0
				if c.on {
					v = 1
				}
				ch <- prom.MustNewConstMetric(e.capability, prom.GaugeValue, v, ns, c.name)
			}
		}
		ch <- prom.MustNewConstMetric(e.inFlight, prom.GaugeValue, float64(c.LoadsInFlight()))
		if h, ok := c.SharedHealth(); ok {
			e.health.collect(ch, h)
		}
		for ns, keys := range c.HotKeys() {
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
	}
	e.loadSeconds.Collect(ch)
}
