package holdfast_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/inmem"
)

// Flights of shared-tier hits are reused; this checks, under the race
// detector, that no read is answered with another key's value while reads
// of a few keys coalesce, hit the shared tier and are invalidated.
func TestReusedFlightsAnswerTheirOwnKey(t *testing.T) {
	c := newCache(t, holdfast.Options{Shared: inmem.New(nil)})
	ns := newNS(t, c, "p", holdfast.Policy{TTL: time.Minute, Hot: holdfast.HotPolicy{MaxBytes: -1}})
	var gen atomic.Int64
	load := func(_ context.Context, key string) ([]byte, error) {
		return fmt.Appendf(nil, "%s/%d", key, gen.Add(1)), nil
	}
	const keys, readers, reads = 8, 16, 2000
	var wg sync.WaitGroup
	var wrong, hits atomic.Int64
	ctx := context.Background()
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for i := range reads {
				key := fmt.Sprint("k", rng.IntN(keys))
				if r == 0 && i%50 == 0 {
					if err := ns.Invalidate(ctx, key); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				res, err := ns.Get(ctx, key, load)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Source == holdfast.SourceShared {
					hits.Add(1)
				}
				if !strings.HasPrefix(string(res.Value), key+"/") {
					wrong.Add(1)
					t.Errorf("a read of %s answered %q", key, res.Value)
					return
				}
			}
		}()
	}
	wg.Wait()
	if wrong.Load() > 0 {
		t.Fatalf("%d reads answered another key's value", wrong.Load())
	}
	if hits.Load() < readers*reads/4 {
		t.Errorf("only %d shared-tier hits of %d reads: the reused flights were hardly exercised", hits.Load(), readers*reads)
	}
	t.Logf("%d shared-tier hits", hits.Load())
}
