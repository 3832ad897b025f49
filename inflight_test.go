package holdfast_test

import (
	"context"
	"sync"
	"testing"

	"github.com/holdfast-dev/holdfast"
)

// loads.in_flight counts a namespace's loader calls running now, each
// namespace its own.
func TestLoadsInFlightPerNamespace(t *testing.T) {
	c := newCache(t, holdfast.Options{})
	a, b := newNS(t, c, "a", holdfast.Policy{}), newNS(t, c, "b", holdfast.Policy{MaxConcurrentLoads: 2})
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	load := func(ctx context.Context, key string) ([]byte, error) {
		started <- struct{}{}
		<-release
		return []byte("v"), nil
	}
	var wg sync.WaitGroup
	for _, r := range []struct {
		ns  *holdfast.Namespace
		key string
	}{{a, "1"}, {a, "2"}, {b, "1"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.ns.Get(context.Background(), r.key, load); err != nil {
				t.Error(err)
			}
		}()
	}
	for range 3 {
		<-started
	}
	if got, want := [2]uint64{a.Stats().Get("loads.in_flight"), b.Stats().Get("loads.in_flight")}, [2]uint64{2, 1}; got != want {
		t.Errorf("loads in flight %v, want %v", got, want)
	}
	close(release)
	wg.Wait()
	eventually(t, "the slots to free", func() bool {
		return a.Stats().Get("loads.in_flight") == 0 && b.Stats().Get("loads.in_flight") == 0
	})
}
