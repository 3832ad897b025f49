package holdfast_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
)

// A load runs on a goroutine an earlier load left idle, and still under the
// pprof labels of the reader that started it, not of the one before: a
// profile split by labels (a request's route, say) counts each load's CPU
// where it belongs.
func TestLoadRunsUnderItsReadersLabels(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Hour})
	instant := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
	pprof.Do(context.Background(), pprof.Labels("reader", "first"), func(ctx context.Context) {
		if _, err := ns.Get(ctx, "a", instant); err != nil {
			t.Error(err)
		}
	})
	settle(t, ns, "a")
	// The flight's goroutine and the loader call's.
	eventually(t, "two idle goroutines", func() bool { return c.IdleWorkers() >= 2 })

	started, gate := make(chan struct{}), make(chan struct{})
	blocking := func(context.Context, string) ([]byte, error) {
		close(started)
		<-gate
		return []byte("v"), nil
	}
	done := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("reader", "second"), func(ctx context.Context) {
		defer close(done)
		if _, err := ns.Get(ctx, "b", blocking); err != nil {
			t.Error(err)
		}
	})
	<-started
	if n := c.IdleWorkers(); n != 0 {
		t.Errorf("%d goroutines idle while the second load runs; want both reused", n)
	}
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	close(gate)
	<-done
	// debug=1 groups goroutines by stack, each group headed by a line with
	// its count and, when it has them, its labels.
	var loader, flight string
	for _, rec := range strings.Split(buf.String(), "\n\n") {
		switch {
		case strings.Contains(rec, "worker_test.go") && strings.Contains(rec, "holdfast.source.load"):
			loader = rec
		case strings.Contains(rec, "holdfast.callBounded") && strings.Contains(rec, "holdfast.(*Namespace).loadNow"):
			flight = rec
		}
	}
	for what, rec := range map[string]string{"loader": loader, "flight": flight} {
		if rec == "" {
			t.Fatalf("no goroutine of the %s in the profile:\n%s", what, buf.String())
		}
		// The second line: "# labels: {...}".
		_, rest, _ := strings.Cut(rec, "\n")
		labels, _, _ := strings.Cut(rest, "\n")
		if !strings.Contains(labels, `"reader":"second"`) {
			t.Errorf("the %s's goroutine has %q; want the second reader's labels", what, labels)
		}
	}
}

// A burst of loads leaves at most MaxIdleWorkers goroutines waiting for
// work, and those end once they have waited a while for none.
func TestIdleWorkersAreBounded(t *testing.T) {
	c := newCache(t, holdfast.Options{MaxConcurrentLoads: -1}) // every load of the burst at once
	ns := newNS(t, c, "product", holdfast.Policy{TTL: time.Hour})
	before := runtime.NumGoroutine()
	const burst = 3 * holdfast.MaxIdleWorkers
	var started sync.WaitGroup
	started.Add(burst)
	gate := make(chan struct{})
	load := func(context.Context, string) ([]byte, error) {
		started.Done()
		<-gate
		return []byte("v"), nil
	}
	var readers sync.WaitGroup
	for i := range burst {
		readers.Add(1)
		go func() {
			defer readers.Done()
			if _, err := ns.Get(context.Background(), fmt.Sprint("k", i), load); err != nil {
				t.Error(err)
			}
		}()
	}
	started.Wait()
	close(gate)
	readers.Wait()
	for i := range burst {
		settle(t, ns, fmt.Sprint("k", i))
	}
	eventually(t, "the burst's goroutines to end or idle", func() bool {
		return runtime.NumGoroutine() <= before+holdfast.MaxIdleWorkers
	})
	if n := c.IdleWorkers(); n > holdfast.MaxIdleWorkers {
		t.Errorf("%d goroutines idle; want at most %d", n, holdfast.MaxIdleWorkers)
	}
	eventually(t, "the idle goroutines to end", func() bool {
		return c.IdleWorkers() == 0 && runtime.NumGoroutine() <= before
	})
}
