package httpapi

import (
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the request counters and latencies, labelled by route
// pattern (a fixed set) and status code.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg *prometheus.Registry, store catalog.Store) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "catalogd_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "catalogd_http_request_duration_seconds",
			Help: "HTTP request latency by route pattern, from routing to the handler's return.",
			// From a hot-tier hit (tens of µs) to a load timeout (5 s).
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
	}
	cs := []prometheus.Collector{m.requests, m.latency}
	if pr, ok := store.(catalog.PoolReporter); ok {
		cs = append(cs, poolCollector{pr})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *httpMetrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// poolCollector reports a store's connection pools at scrape time, so the
// request path never touches them.
type poolCollector struct{ pr catalog.PoolReporter }

var (
	poolLabels  = []string{"pool"}
	poolMaxOpen = prometheus.NewDesc("catalogd_db_pool_max_open_connections", "The pool's connection limit.", poolLabels, nil)
	poolOpen    = prometheus.NewDesc("catalogd_db_pool_open_connections", "Connections open, in use or idle.", poolLabels, nil)
	poolInUse   = prometheus.NewDesc("catalogd_db_pool_in_use_connections", "Connections lent out.", poolLabels, nil)
	poolIdle    = prometheus.NewDesc("catalogd_db_pool_idle_connections", "Connections waiting in the pool.", poolLabels, nil)
	poolWaits   = prometheus.NewDesc("catalogd_db_pool_waits_total", "Acquisitions that had to wait for a connection.", poolLabels, nil)
	poolWaitSec = prometheus.NewDesc("catalogd_db_pool_wait_seconds_total", "Time spent waiting for a connection.", poolLabels, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolMaxOpen, poolOpen, poolInUse, poolIdle, poolWaits, poolWaitSec} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.pr.PoolStats() {
		ch <- prometheus.MustNewConstMetric(poolMaxOpen, prometheus.GaugeValue, float64(s.MaxOpen), s.Name)
		ch <- prometheus.MustNewConstMetric(poolOpen, prometheus.GaugeValue, float64(s.Open), s.Name)
		ch <- prometheus.MustNewConstMetric(poolInUse, prometheus.GaugeValue, float64(s.InUse), s.Name)
		ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.Idle), s.Name)
		ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.WaitCount), s.Name)
		ch <- prometheus.MustNewConstMetric(poolWaitSec, prometheus.CounterValue, s.WaitDuration.Seconds(), s.Name)
	}
}
