package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// lockedBuffer is a log destination for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(strings.TrimSuffix(w.b.String(), "\n"), "\n")
}

// A flood of 1,000 occurrences over 25 s, from 10 goroutines, writes one line
// at the first occurrence and then one line per 10 s interval, and the
// counts on the lines add up to every occurrence but those after the last
// line.
func TestFloodIsOneLinePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		l := New(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		})), slog.LevelWarn, "redis failing", 10*time.Second)
		var wg sync.WaitGroup
		for g := range 10 {
			wg.Go(func() {
				for i := range 100 {
					l.Log(context.Background(), slog.Int("g", g), slog.Int("i", i))
					time.Sleep(250 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		lines := out.lines()
		// Lines at 0 s, 10 s and 20 s.
		if len(lines) != 3 {
			t.Fatalf("%d lines for 1,000 occurrences over 25 s, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if !strings.Contains(lines[0], "count=1") || !strings.HasPrefix(lines[0], `level=WARN msg="redis failing"`) {
			t.Errorf("first line %q, want the first occurrence alone", lines[0])
		}
		// Every 250 ms each of 10 goroutines: 400 occurrences a 10 s
		// interval.
		for _, line := range lines[1:] {
			if !strings.HasSuffix(line, " count=400") {
				t.Errorf("line %q, want count=400", line)
			}
		}
		if n := l.Reset(); n != 199 {
			t.Errorf("Reset: %d skipped since the last line, want 199", n)
		}
		l.Log(context.Background())
		if lines := out.lines(); len(lines) != 4 || !strings.HasSuffix(lines[3], "count=1") {
			t.Errorf("after Reset the next occurrence is not written at once: %q", lines[len(lines)-1])
		}
	})
}
