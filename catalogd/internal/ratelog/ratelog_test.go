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

// lines returns the lines written to b, read once the writers are done
// (slog's handlers serialize their writes).
func lines(b *bytes.Buffer) []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// A flood of 1,000 occurrences over 25 s, from 10 goroutines, writes one line
// at the first occurrence and then one line per 10 s interval, and the
// counts on the lines add up to every occurrence but those after the last
// line.
func TestFloodIsOneLinePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
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
		got := lines(&out)
		// Lines at 0 s, 10 s and 20 s.
		if len(got) != 3 {
			t.Fatalf("%d lines for 1,000 occurrences over 25 s, want 3:\n%s", len(got), strings.Join(got, "\n"))
		}
		if !strings.Contains(got[0], "count=1") || !strings.HasPrefix(got[0], `level=WARN msg="redis failing"`) {
			t.Errorf("first line %q, want the first occurrence alone", got[0])
		}
		// Every 250 ms each of 10 goroutines: 400 occurrences a 10 s
		// interval.
		for _, line := range got[1:] {
			if !strings.HasSuffix(line, " count=400") {
				t.Errorf("line %q, want count=400", line)
			}
		}
		if n := l.Reset(); n != 199 {
			t.Errorf("Reset: %d skipped since the last line, want 199", n)
		}
		l.Log(context.Background())
		if got := lines(&out); len(got) != 4 || !strings.HasSuffix(got[3], "count=1") {
			t.Errorf("after Reset the next occurrence is not written at once: %q", got[len(got)-1])
		}
	})
}

// Add counts n occurrences; Reported starts an interval without a line.
func TestAddAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		l := New(slog.New(slog.NewTextHandler(&out, nil)), slog.LevelWarn, "failing", time.Minute)
		l.Reported()
		l.Add(context.Background(), 5)
		if s := out.String(); s != "" {
			t.Fatalf("a line within the interval Reported started: %s", s)
		}
		time.Sleep(time.Minute)
		l.Add(context.Background(), 7)
		if got := lines(&out); len(got) != 1 || !strings.HasSuffix(got[0], "count=12") {
			t.Errorf("lines %q, want one with count=12", got)
		}
	})
}

// LogFunc builds the attributes only for the lines it writes: 1,000
// occurrences within one interval call it once, and the next line, an
// interval later, a second time with the count of all the others.
func TestLogFuncBuildsAttrsOnlyForLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		l := New(slog.New(slog.NewTextHandler(&out, nil)), slog.LevelWarn, "request rejected", 10*time.Second)
		built := 0
		attrs := func() []slog.Attr {
			built++
			return []slog.Attr{slog.Int("built", built)}
		}
		for range 1000 {
			l.LogFunc(context.Background(), attrs)
		}
		if built != 1 {
			t.Fatalf("attributes built %d times for one line", built)
		}
		time.Sleep(10 * time.Second)
		l.LogFunc(context.Background(), attrs)
		got := lines(&out)
		if built != 2 || len(got) != 2 || !strings.Contains(got[1], "built=2 count=1000") {
			t.Errorf("built %d times; lines:\n%s", built, out.String())
		}
	})
}
