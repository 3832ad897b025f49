package holdfastprom

import (
	"github.com/holdfast-dev/holdfast/tier"
	prom "github.com/prometheus/client_golang/prometheus"
)

// Breaker is the shared tier's breaker as the tier reports it (package
// redis, Tier.Stats); the caller converts.
type Breaker = tier.Breaker

// BreakerStates are the values of the state label of
// holdfast_redis_breaker_state.
var BreakerStates = []string{"closed", "open", "half_open"}

// BreakerCollector reports a tier's breaker from a snapshot function called
// at each scrape.
type BreakerCollector struct {
	breaker            func() (Breaker, bool)
	state, opens, trns *prom.Desc
}

var _ prom.Collector = (*BreakerCollector)(nil)

// NewBreakerCollector returns a BreakerCollector over breaker, which reports
// false while there is no tier to ask (one that connects in the background,
// say): nothing is exported then.
func NewBreakerCollector(breaker func() (Breaker, bool)) *BreakerCollector {
	return &BreakerCollector{
		breaker: breaker,
		state:   prom.NewDesc("holdfast_redis_breaker_state", "1 for the shared tier's breaker state: closed, open (Redis skipped) or half_open (probing).", []string{"state"}, nil),
		opens:   prom.NewDesc("holdfast_redis_breaker_opens_total", "Times the shared tier's breaker opened.", nil, nil),
		trns:    prom.NewDesc("holdfast_redis_breaker_transitions_total", "State changes of the shared tier's breaker.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *BreakerCollector) Describe(ch chan<- *prom.Desc) {
	ch <- c.state
	ch <- c.opens
	ch <- c.trns
}

// Collect implements prometheus.Collector.
func (c *BreakerCollector) Collect(ch chan<- prom.Metric) {
	b, ok := c.breaker()
	if !ok {
		return
	}
	for _, s := range BreakerStates {
		v := 0.0
		if s == b.State {
			v = 1
		}
		ch <- prom.MustNewConstMetric(c.state, prom.GaugeValue, v, s)
	}
	ch <- prom.MustNewConstMetric(c.opens, prom.CounterValue, float64(b.Opens))
	ch <- prom.MustNewConstMetric(c.trns, prom.CounterValue, float64(b.Transitions))
}
