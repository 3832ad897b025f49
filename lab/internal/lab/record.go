package lab

import (
	"math"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds from 1 µs to 5 minutes with three
// significant digits: every request of a mode is bounded well below that (the
// drain grace cuts off the rest), and three digits keep p99 exact to 0.1%.
const (
	histMin    = 1
	histMax    = int64(5 * time.Minute / time.Microsecond)
	histDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histDigits) }

// Outcome is what one request ended with, as the caller of the cache saw it.
type Outcome int

const (
	// OK is a value served fresh.
	OK Outcome = iota
	// Stale is a value served although it was past its freshness (a
	// stale-while-revalidate or stale-if-error answer). It is not an error.
	Stale
	// Rejected is a request refused by a load limit (the source's cap or
	// holdfast's limiter): a product service's immediate 503.
	Rejected
	// Failed is any other error, including requests the load generator
	// dropped because too many were already in flight.
	Failed
)

// Stats are the figures of one mode, overall or for the fault window only. The
// JSON names are the lab's output schema; times in milliseconds.
type Stats struct {
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	Rejected    int64   `json:"rejected"`
	Stale       int64   `json:"stale"`
	LoaderCalls int64   `json:"loader_calls"`
	P50         float64 `json:"p50_ms"`
	P95         float64 `json:"p95_ms"`
	P99         float64 `json:"p99_ms"`
	Max         float64 `json:"max_ms"`
}

// Second is one 1-second bucket of the time series drawn in the chart.
type Second struct {
	Requests    int64
	Errors      int64
	Rejected    int64
	Stale       int64
	LoaderCalls int64
	P50, P95    float64 // ms; 0 when the second had no request
	P99, Max    float64
}

// Recorder collects the latency and outcome of every request of one mode:
// overall, inside the fault window, and per second since the start. Requests
// are placed by their scheduled start offset, so a request that began in the
// fault window counts there even when it ended after it.
//
// A mutex guards the histograms (they are not safe for concurrent use); at the
// lab's rates (hundreds to a few thousand requests a second) one lock is far
// from being the bottleneck.
type Recorder struct {
	win0, win1 time.Duration // fault window [win0, win1); empty when equal

	mu      sync.Mutex
	all     *hdrhistogram.Histogram
	win     *hdrhistogram.Histogram
	allC    counts
	winC    counts
	seconds []*secondBucket
}

type counts struct{ requests, errors, rejected, stale int64 }

func (c *counts) add(o Outcome) {
	c.requests++
	switch o {
	case Stale:
		c.stale++
	case Rejected:
		c.rejected++
	case Failed:
		c.errors++
	}
}

type secondBucket struct {
	h *hdrhistogram.Histogram
	c counts
}

// NewRecorder returns a Recorder whose fault window is [winStart, winEnd)
// measured from the start of the run; pass equal values for no window.
func NewRecorder(winStart, winEnd time.Duration) *Recorder {
	return &Recorder{win0: winStart, win1: winEnd, all: newHist(), win: newHist()}
}

// InWindow reports whether offset at falls in the fault window.
func (r *Recorder) InWindow(at time.Duration) bool { return at >= r.win0 && at < r.win1 }

// Record adds one request that was scheduled at offset at and took lat.
func (r *Recorder) Record(at, lat time.Duration, o Outcome) {
	us := max(int64(lat/time.Microsecond), histMin)
	us = min(us, histMax) // a value past the range would be dropped silently
	sec := int(max(at, 0) / time.Second)

	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.all.RecordValue(us)
	r.allC.add(o)
	if r.InWindow(at) {
		_ = r.win.RecordValue(us)
		r.winC.add(o)
	}
	for len(r.seconds) <= sec {
		r.seconds = append(r.seconds, &secondBucket{h: newHist()})
	}
	b := r.seconds[sec]
	_ = b.h.RecordValue(us)
	b.c.add(o)
}

// Overall returns the figures of every request recorded; LoaderCalls is left
// to the caller, which knows the source.
func (r *Recorder) Overall() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return stats(r.all, r.allC)
}

// Window returns the figures of the requests scheduled in the fault window.
func (r *Recorder) Window() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return stats(r.win, r.winC)
}

// Seconds returns the per-second series, at least n long (seconds with no
// request are zero), so that every mode of a scenario spans the same axis.
func (r *Recorder) Seconds(n int) []Second {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Second, max(n, len(r.seconds)))
	for i, b := range r.seconds {
		s := stats(b.h, b.c)
		out[i] = Second{
			Requests: s.Requests, Errors: s.Errors, Rejected: s.Rejected, Stale: s.Stale,
			P50: s.P50, P95: s.P95, P99: s.P99, Max: s.Max,
		}
	}
	return out
}

func stats(h *hdrhistogram.Histogram, c counts) Stats {
	s := Stats{Requests: c.requests, Errors: c.errors, Rejected: c.rejected, Stale: c.stale}
	if h.TotalCount() == 0 {
		return s
	}
	s.P50 = usToMs(h.ValueAtQuantile(50))
	s.P95 = usToMs(h.ValueAtQuantile(95))
	s.P99 = usToMs(h.ValueAtQuantile(99))
	s.Max = usToMs(h.Max())
	return s
}

// usToMs converts to milliseconds rounded to the microsecond, so the JSON
// stays readable.
func usToMs(us int64) float64 { return math.Round(float64(us)) / 1000 }
