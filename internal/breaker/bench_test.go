package breaker

import "testing"

// BenchmarkAllowDone is the breaker's cost per call on the hot path: closed,
// every call a success, all goroutines at once.
func BenchmarkAllowDone(b *testing.B) {
	br, err := New(Settings{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			gen, ok := br.Allow()
			if ok {
				br.Done(gen, Success)
			}
		}
	})
}
