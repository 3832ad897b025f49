package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/redis"
)

// TestRedisWatch runs the watch, with a log interval of 400 ms, over a
// Redis that is down when the tier starts, comes up, is killed under reads
// and comes back: each state is logged once, or once an interval with a
// count while it lasts, never once a poll.
func TestRedisWatch(t *testing.T) {
	r := redistest.Standalone(t)
	r.Kill() // Restart starts it again on the same port
	l, err := redis.NewLazy(redis.Options{Addrs: []string{r.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A file, which the test reads while the watch writes to it.
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := logFile(f.Name())
	w := watchRedis(l, slog.New(slog.NewTextHandler(f, nil)), 20*time.Millisecond, 400*time.Millisecond)
	defer w.Close()
	waitLog := func(re string, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); !regexp.MustCompile(re).MatchString(out.String()); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no line matching %s within %v:\n%s", re, within, out.String())
			}
		}
	}

	time.Sleep(time.Second)
	// The startup line counts as the first: a line at 400 ms, and one at
	// 800 ms unless the machine is slow; never one per poll (50).
	if n := strings.Count(out.String(), "Redis still not connected"); n < 1 || n > 2 {
		t.Errorf("%d lines while Redis was down for 1 s, want 1 or 2:\n%s", n, out.String())
	}
	r.Restart()
	waitLog(`msg="Redis connected" cluster=false`, 20*time.Second)

	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				l.Get(context.Background(), "k")
			}
		}
	}()
	defer func() { close(stop); <-done }()
	r.Kill()
	waitLog(`msg="Redis calls failing; serving from in-process tiers and the database" timeouts=\d+ breaker=\w+ count=[1-9]`, 5*time.Second)
	time.Sleep(200 * time.Millisecond) // within the interval: counted, not logged
	// One line per episode of failures: a read past its budget before the
	// kill (a loaded machine) makes an episode of its own, ended by a line
	// that calls succeed again.
	log := out.String()
	if n, episodes := strings.Count(log, "Redis calls failing"), 1+strings.Count(log, "Redis calls succeed again"); n != episodes {
		t.Errorf("%d lines of failing calls for %d episodes of failures, want one each:\n%s", n, episodes, log)
	}
	r.Restart()
	waitLog(`msg="Redis calls succeed again" failures_not_logged=\d+`, 40*time.Second)
}

var quiet = slog.New(slog.DiscardHandler)

// logFile is a log written to a file, read whole by String.
type logFile string

func (f logFile) String() string {
	b, _ := os.ReadFile(string(f))
	return string(b)
}
