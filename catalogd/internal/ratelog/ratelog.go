// Package ratelog logs an event that can repeat many times a second (a
// failing Redis connection, a failing readiness check polled by a load
// balancer, a refused request) at most once per interval. The first
// occurrence is logged at once; the ones that follow within the interval
// are counted, and the next line written says how many occurrences it
// stands for. A flood then costs one line an interval, and every occurrence
// is still accounted for by the line that follows it.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Logger writes one message, rate-limited. It is safe for concurrent use.
type Logger struct {
	log      *slog.Logger
	level    slog.Level
	msg      string
	interval time.Duration

	mu      sync.Mutex
	last    time.Time // when the last line was written; zero before the first
	skipped int       // occurrences since then that were not written
}

// New returns a Logger writing msg to log at level at most once per
// interval.
func New(log *slog.Logger, level slog.Level, msg string, interval time.Duration) *Logger {
	return &Logger{log: log, level: level, msg: msg, interval: interval}
}

// Log records one occurrence. It writes a line with attrs and count (the
// occurrences this line stands for: this one and those skipped since the
// previous line) unless a line was written less than the interval ago; then
// it only counts. Attributes of skipped occurrences are not kept: the line
// carries the latest.
func (l *Logger) Log(ctx context.Context, attrs ...slog.Attr) { l.Add(ctx, 1, attrs...) }

// Add is Log for n occurrences at once (failed calls counted since the
// last look, say).
func (l *Logger) Add(ctx context.Context, n int, attrs ...slog.Attr) {
	l.add(ctx, n, func() []slog.Attr { return attrs })
}

// LogFunc is Log for attributes that cost something to build (an error
// message redacted by regular expressions, say): attrs is called only for
// an occurrence that is written, so a flood of skipped ones costs a count
// each.
func (l *Logger) LogFunc(ctx context.Context, attrs func() []slog.Attr) { l.add(ctx, 1, attrs) }

func (l *Logger) add(ctx context.Context, n int, attrs func() []slog.Attr) {
	now := time.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.skipped += n
		l.mu.Unlock()
		return
	}
	count := l.skipped + n
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	l.log.LogAttrs(ctx, l.level, l.msg, append(attrs(), slog.Int("count", count))...)
}

// Reported records an occurrence that was logged some other way (a line
// at startup): it starts an interval as a line of its own would, without
// writing one.
func (l *Logger) Reported() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
}

// Reset forgets the last line and the skipped count, so that the next
// occurrence is written at once: for an event that stopped (a check that
// passes again) and whose return is news. It returns the occurrences that
// were skipped since the last line.
func (l *Logger) Reset() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.skipped
	l.last, l.skipped = time.Time{}, 0
	return n
}
