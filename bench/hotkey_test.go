package bench

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/hotkey"
)

// zipfKeys is a fixed Zipf(s = 1.1) walk over 100,000 keys.
var zipfKeys = func() []string {
	r := rand.New(rand.NewPCG(3, 4))
	z := rand.NewZipf(r, 1.1, 1, 100_000-1)
	out := make([]string, 1<<16)
	for i := range out {
		out[i] = "product:" + strconv.FormatUint(z.Uint64(), 10)
	}
	return out
}()

// BenchmarkHotKeyRecord is the read-path cost of hot-key detection: one
// Record per read, from every core, over Zipf-distributed keys. The target
// is about 20 ns with no global lock.
func BenchmarkHotKeyRecord(b *testing.B) {
	d := hotkey.New(hotkey.Options{})
	now := time.Now().UnixNano()
	var seed atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := seed.Add(7919)
		for pb.Next() {
			d.Record(zipfKeys[i&0xffff], now)
			i++
		}
	})
}

// BenchmarkGetHitDetected is BenchmarkGetHit's holdfast case with hot-key
// detection on (Hot.Keys = HotDetected): what detection adds to a hit.
func BenchmarkGetHitDetected(b *testing.B) {
	ks, v := keys(hitKeys), value()
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ns, _ := c.Namespace("product", holdfast.Policy{TTL: time.Hour, Hot: holdfast.HotPolicy{Keys: holdfast.HotDetected, Threshold: 1}})
	load := holdfast.LoaderFunc(func(context.Context, string) ([]byte, error) { return v, nil })
	ctx := context.Background()
	// Read every key until it is hot and in the hot tier.
	for range 200 {
		for _, k := range ks {
			ns.Get(ctx, k, load)
		}
	}
	var seed atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := seed.Add(7919)
		for pb.Next() {
			if _, err := ns.Get(ctx, ks[keyIndexes[i&0xffff]], load); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.StopTimer()
	if st := ns.Stats(); float64(st.HotHits) < 0.9*float64(st.Reads-200*hitKeys) {
		b.Fatalf("only %d of %d timed reads were hot-tier hits", st.HotHits, st.Reads)
	}
}
