package holdfast_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
)

// healthTier is an inmem tier that reports the health a test sets.
type healthTier struct {
	*inmem.Tier
	h atomic.Pointer[tier.Health]
}

func (h *healthTier) Health() tier.Health { return *h.h.Load() }

func (h *healthTier) set(v tier.Health) { h.h.Store(&v) }

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// lines returns the messages logged so far containing substr, with their
// attributes as "key=value".
func (l *logRecords) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if !strings.Contains(r.Message, substr) {
			continue
		}
		s := r.Message
		r.Attrs(func(a slog.Attr) bool {
			s += " " + a.String()
			return true
		})
		out = append(out, s)
	}
	return out
}

// waitLines waits up to d for n lines containing substr.
func (l *logRecords) waitLines(t *testing.T, substr string, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := l.lines(substr)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The Cache logs a tier's outage, with its reason, and its end, through
// Options.Logger; the capabilities of a tier that was not connected at New
// are logged once it is, as they are then.
func TestSharedTierOutageLogged(t *testing.T) {
	ht := &healthTier{Tier: inmem.New(nil)}
	ht.set(tier.Health{})
	logs := &logRecords{}
	c, err := holdfast.New(holdfast.Options{Shared: ht, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := logs.lines("holdfast: shared tier"); len(got) != 0 {
		t.Fatalf("logged before the tier connected: %q", got)
	}
	ht.set(tier.Health{Down: true, Reason: tier.ReasonUnreachable})
	got := logs.waitLines(t, "shared tier down", 1, 5*time.Second)
	if len(got) != 1 || !strings.Contains(got[0], "reason=unreachable") || !strings.Contains(got[0], "tier=shared") {
		t.Fatalf("down lines: %q", got)
	}
	ht.set(tier.Health{Connected: true})
	got = logs.waitLines(t, "shared tier recovered", 1, 5*time.Second)
	if len(got) != 1 || !strings.Contains(got[0], "down_for=") {
		t.Fatalf("recovery lines: %q", got)
	}
	got = logs.waitLines(t, "holdfast: shared tier", 3, 5*time.Second)
	var caps []string
	for _, l := range got {
		if strings.Contains(l, "capabilities=") {
			caps = append(caps, l)
		}
	}
	if len(caps) != 1 || !strings.Contains(caps[0], "versions=true") {
		t.Fatalf("capability lines: %q", caps)
	}
	if h, ok := c.SharedHealth(); !ok || !h.Connected || h.Down {
		t.Fatalf("SharedHealth = %+v, %v", h, ok)
	}
}

// A tier that does not report its health has none, and its capabilities
// are logged at New.
func TestSharedHealthWithoutReporter(t *testing.T) {
	logs := &logRecords{}
	c, err := holdfast.New(holdfast.Options{Shared: inmem.New(nil), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.SharedHealth(); ok {
		t.Error("SharedHealth reported for an inmem tier")
	}
	if got := logs.lines("holdfast: shared tier"); len(got) != 1 || !strings.Contains(got[0], "capabilities=") {
		t.Fatalf("capability lines at New: %q", got)
	}
}
