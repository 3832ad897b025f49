package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestTelemetry: with Telemetry set (the SDK's in-memory reader and span
// recorder; -otel-endpoint makes OTLP exporters instead), a product read
// that misses makes a holdfast.get span naming the product, and the cache's
// instruments count the reads.
func TestTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	m := newQuietMain()
	m.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := m.ParseFlags([]string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir(), "-redis", ""}); err != nil {
		t.Fatal(err)
	}
	m.Telemetry = Telemetry{
		Meters:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for range 2 {
		resp, err := http.Get(m.server.URL() + "/v1/products/42")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var keys []string
	for _, s := range rec.Ended() {
		if s.Name() != "holdfast.get" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "holdfast.key" {
				keys = append(keys, a.Value.AsString())
			}
		}
	}
	if len(keys) != 2 || keys[0] != "42" {
		t.Fatalf("holdfast.get spans for keys %q, want product 42's and stock 42's misses (the second request hits the hot tier)", keys)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	reads := int64(-1)
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if sum, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "holdfast.reads" {
				for _, p := range sum.DataPoints {
					if v, _ := p.Attributes.Value("holdfast.namespace"); v.AsString() == "product" {
						reads = p.Value
					}
				}
			}
		}
	}
	if reads != 2 {
		t.Fatalf("holdfast.reads for product = %d, want 2", reads)
	}
	// The Prometheus exporter, fed by the same Stats, says the same.
	resp, err := http.Get(m.server.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `holdfast_reads_total{namespace="product"} 2`; !strings.Contains(string(body), want) {
		t.Fatalf("/metrics lacks %q", want)
	}
}
