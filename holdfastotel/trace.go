package holdfastotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/holdfast-dev/holdfast/observe"
)

// TraceOptions configures NewTracer.
type TraceOptions struct {
	// KeyNamespaces names the namespaces whose keys may be span
	// attributes (holdfast.key, for a read of one key). None by default: a
	// key can be user input (a search query) that must not be copied into
	// the tracing system.
	KeyNamespaces []string
}

// Tracer is a observe.Tracer that makes OpenTelemetry spans.
type Tracer struct {
	t    trace.Tracer
	keys map[string]bool
}

var _ observe.Tracer = (*Tracer)(nil)

// NewTracer returns a Tracer whose spans come from tp; set it as
// holdfast.Options.Tracer.
func NewTracer(tp trace.TracerProvider, o TraceOptions) *Tracer {
	keys := make(map[string]bool, len(o.KeyNamespaces))
	for _, ns := range o.KeyNamespaces {
		keys[ns] = true
	}
	return &Tracer{t: tp.Tracer(ScopeName), keys: keys}
}

// StartRead implements observe.Tracer: a holdfast.get span.
func (t *Tracer) StartRead(ctx context.Context, namespace string, keys []string) (context.Context, observe.ReadTrace) {
	attrs := []attribute.KeyValue{attribute.String("holdfast.namespace", namespace), attribute.Int("holdfast.keys", len(keys))}
	if len(keys) == 1 && t.keys[namespace] {
		attrs = append(attrs, attribute.String("holdfast.key", keys[0]))
	}
	ctx, span := t.t.Start(ctx, "holdfast.get", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, readSpan{span}
}

type readSpan struct{ span trace.Span }

func (r readSpan) End(res observe.ReadResult) {
	r.span.SetAttributes(
		attribute.String("holdfast.source", res.Source),
		attribute.String("holdfast.reason", res.Reason),
		attribute.Bool("holdfast.collapsed", res.Collapsed),
		attribute.Bool("holdfast.stale", res.Stale),
	)
	if err := res.Err; err != nil {
		r.span.RecordError(err)
		r.span.SetStatus(codes.Error, err.Error())
	}
	r.span.End()
}

// StartStage implements observe.Tracer: a holdfast.<stage> span.
func (t *Tracer) StartStage(ctx context.Context, stage observe.Stage) observe.StageTrace {
	_, span := t.t.Start(ctx, "holdfast."+stage.String(), trace.WithSpanKind(trace.SpanKindInternal))
	return stageSpan{span}
}

type stageSpan struct{ span trace.Span }

func (s stageSpan) End(r observe.StageResult) {
	s.span.SetAttributes(attribute.String("holdfast.outcome", r.Outcome))
	if r.Node != "" {
		s.span.SetAttributes(attribute.String("server.address", r.Node))
	}
	if r.Err != nil {
		s.span.RecordError(r.Err)
		s.span.SetStatus(codes.Error, r.Err.Error())
	}
	s.span.End()
}
