package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/holdfastotel"
	"github.com/holdfast-dev/holdfast/observe"
)

// Telemetry is where catalogd sends OpenTelemetry metrics and traces,
// beside its Prometheus /metrics: the cache's counters, gauges and load
// latencies, and a span for each read that leaves the hot tier, with its
// stages (holdfastotel). Set Main.Telemetry to providers of your own (a test
// uses the SDK's in-memory reader and span recorder); with -otel-endpoint,
// catalogd makes OTLP/HTTP exporters to that collector.
type Telemetry struct {
	Meters  metric.MeterProvider
	Tracers trace.TracerProvider
}

// otlpTelemetry returns providers exporting to the OTLP/HTTP collector at
// endpoint (a URL, http://host:4318 say), and the function that flushes
// and stops them.
func otlpTelemetry(ctx context.Context, endpoint string) (Telemetry, func(context.Context) error, error) {
	te, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return Telemetry{}, nil, fmt.Errorf("-otel-endpoint %q: traces: %w", endpoint, err)
	}
	me, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(endpoint))
	if err != nil {
		return Telemetry{}, nil, fmt.Errorf("-otel-endpoint %q: metrics: %w", endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(te))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(15*time.Second))))
	stop := func(ctx context.Context) error { return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)) }
	return Telemetry{Meters: mp, Tracers: tp}, stop, nil
}

// tracer is the cache's observe.Tracer for t, or nil. Product and stock
// keys are ids and may be span attributes; list and search keys are what
// clients typed, and may not.
func (t Telemetry) tracer() observe.Tracer {
	if t.Tracers == nil {
		return nil
	}
	return holdfastotel.NewTracer(t.Tracers, holdfastotel.TraceOptions{KeyNamespaces: []string{httpapi.NamespaceProduct, httpapi.NamespaceStock}})
}

// register exports c's instruments, the shared tier's health with them,
// to t's meters, when it has some.
func (t Telemetry) register(c *holdfast.Cache) error {
	if t.Meters == nil {
		return nil
	}
	o := holdfastotel.Options{HotKeyNamespaces: []string{httpapi.NamespaceProduct, httpapi.NamespaceStock}}
	_, err := holdfastotel.Register(t.Meters, c, o)
	return err
}
