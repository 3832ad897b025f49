package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/memtest"
)

// BenchmarkStoreMemory fills a namespace's in-process stores, a 16 MiB hot
// tier and 32 MiB of last-known-good (catalogd's search namespace), with
// distinct keys until both are at their budgets and have evicted what
// last-known-good holds (memtest.Fill), then measures the live heap the
// namespace holds, after GC, against the 48 MiB configured:
//
//	cd bench && go test -run '^$' -bench StoreMemory -benchtime 1x
//
// heap/budget must be at most 1.25 for every value size: a byte budget is
// what an operator sizes a process by. fill is the fraction of the budget the
// stores count as held; it must be at least 0.9, so that a store cannot pass
// by charging each entry many times its cost and holding little. The hot
// tier's entries are also in last-known-good and share their key and value
// bytes, which each store counts: for large values heap/budget is near
// 32/48 while fill is near 1.
func BenchmarkStoreMemory(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"16B", 16}, {"512B", 512}, {"16KiB", 16 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			for b.Loop() {
				heap, fill, entries := fillNamespace(b, size.bytes)
				b.ReportMetric(heap, "heap/budget")
				b.ReportMetric(fill, "fill")
				b.ReportMetric(float64(entries), "entries")
				if heap > 1.25 {
					b.Fatalf("live heap is %.2f× the configured budget (at most 1.25); fill %.2f", heap, fill)
				}
				if fill < 0.9 {
					b.Fatalf("the stores hold %.2f of their budget (at least 0.9); heap/budget %.2f", fill, heap)
				}
			}
		})
	}
}

const (
	memHotBytes = 16 << 20
	memLKGBytes = 32 << 20
)

// fillNamespace fills a namespace with values of valueSize bytes and returns
// its live heap over the configured bytes, the fraction of those bytes its
// stores count as held, and the entries they hold.
func fillNamespace(b *testing.B, valueSize int) (heapRatio, fill float64, entries uint64) {
	base := memtest.LiveHeap()
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace("search", holdfast.Policy{
		TTL:                time.Hour,
		StaleIfError:       time.Hour,
		LastKnownGoodBytes: memLKGBytes,
		Hot:                holdfast.HotPolicy{MaxBytes: memHotBytes},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := memtest.FillNamespace(ns, valueSize); err != nil {
		b.Fatal(err)
	}
	st := ns.Stats()
	entries = st.Get("hot.entries") + st.Get("last_known_good.entries")
	heap := memtest.LiveHeap() - base
	runtime.KeepAlive(ns)
	// Stats gives the hot tier's bytes; last-known-good charges its entries
	// the same, both stores charging by key and value size.
	perEntry := float64(st.Get("hot.bytes")) / float64(st.Get("hot.entries"))
	counted := float64(st.Get("hot.bytes")) + perEntry*float64(st.Get("last_known_good.entries"))
	const budget = memHotBytes + memLKGBytes
	return float64(heap) / budget, counted / budget, entries
}
