package bench

import (
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
// detection on (a positive Hot.Threshold): what detection adds to a hit. Every
// key is read until it is hot; every timed read must be a hot-tier hit.
func BenchmarkGetHitDetected(b *testing.B) {
	benchHits(b, func() (hitReader, func()) {
		return newHoldfastReader(holdfast.Policy{TTL: time.Hour, Hot: holdfast.HotPolicy{Threshold: 1}}, 200)
	})
}
