package local

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkGet is a parallel hit, keys read in a pseudo-random walk, beside
// the same lookup through a sync.Map (string → *node), the index this Store
// had before: the figures behind the package comment.
//
//	go test -run '^$' -bench Get -count 6 ./internal/local
func BenchmarkGet(b *testing.B) {
	for _, keys := range []int{1 << 10, 1 << 16} { // powers of two, for walk
		names := keyNames(keys)
		b.Run(fmt.Sprintf("index/%d", keys), func(b *testing.B) {
			s := New[[]byte](1 << 30)
			for _, k := range names {
				s.Set(k, make([]byte, 16), 16, 1<<62, 0)
			}
			walk(b, names, func(k string) bool { return s.Get(k, 0) != nil })
		})
		b.Run(fmt.Sprintf("syncmap/%d", keys), func(b *testing.B) {
			var m sync.Map
			for _, k := range names {
				m.Store(k, &node[[]byte]{key: k, val: make([]byte, 16), expires: 1 << 62})
			}
			walk(b, names, func(k string) bool {
				v, ok := m.Load(k)
				if !ok {
					return false
				}
				n := v.(*node[[]byte])
				if 0 >= n.expires {
					return false
				}
				if n.state.Load()&1 == 0 {
					n.state.Store(1)
				}
				return true
			})
		})
	}
}

// walk calls get from GOMAXPROCS goroutines, each on its own walk over
// names (a power of two of them), and fails on a miss.
func walk(b *testing.B, names []string, get func(key string) bool) {
	var goroutines atomic.Uint64
	mask := uint64(len(names) - 1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := goroutines.Add(1) * 0x9e3779b97f4a7c15
		for pb.Next() {
			x = x*6364136223846793005 + 1442695040888963407 // a linear congruential step
			if !get(names[x>>32&mask]) {
				b.Fatal("a miss")
			}
		}
	})
}

// BenchmarkMissSet is a cache's write: a Get that misses, then the Set of
// the missed key into a full store, which evicts to make room. Keys come
// from a Zipf (s = 1.1) walk over ten times the keys the store holds, as
// a read-through cache sees them, so the policy's admission and eviction
// are in each write. The store is seeded, so that its instruction count
// (see the package comment) is the same in every run: seeded at random,
// two runs differed by 10 instructions a write.
//
//	go test -run '^$' -bench MissSet -count 6 ./internal/local
func BenchmarkMissSet(b *testing.B) {
	const held = 16
	s := New[[]byte](4 << 20)
	s.Seed(1)
	entries := int((4 << 20) / s.Cost("k0000000", held))
	r := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 1<<20)
	for i := range names {
		names[i] = fmt.Sprintf("k%07d", r.IntN(10*entries))
	}
	v := make([]byte, held)
	for i := range 4 * entries {
		s.Set(fmt.Sprintf("k%07d", i), v, held, 1<<62, 0)
	}
	misses := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := names[i&(len(names)-1)]
		if s.Get(k, 0) == nil {
			misses++
			s.Set(k, v, held, 1<<62, 0)
		}
	}
	b.ReportMetric(float64(misses)/float64(b.N), "misses/op")
}
