package holdfast

// A read that misses the hot tier runs about 6 KiB deep by the time it is
// in the shared tier's client (flight, lookup, the tier's routing and
// guard, rueidis's pipeline). A goroutine starts with a 2 KiB stack, and a
// server's request goroutine is often new: on the way down its stack is
// copied twice, the second time with a dozen frames to adjust, which costs
// about six times the rest of an in-memory shared-tier hit
// (BenchmarkGetSharedHitFresh: 5.8-6.0 µs a read on a fresh goroutine,
// 0.8 µs on a reused one; 2.2 µs with growStack).
// growStack, called before the descent, makes the runtime size the stack
// for it at once, while few frames are on it.

// growStackBytes is growStack's frame: with the stack guard and the
// caller's frames it takes a 2 KiB stack to 8 KiB in one copy.
const growStackBytes = 5 << 10

// growStack grows the calling goroutine's stack, once, to hold a read past
// the hot tier. Its frame holds an array that only a branch no caller takes
// (i < 0) uses: the frame is sized for it, so the stack check at entry
// grows the stack, but it is never cleared or touched. Clearing it on
// every read cost about 2% of the shared-hit throughput, the cache lines
// of 5 KiB of stack a read.
//
//go:noinline
func growStack(i int) byte {
	if i < 0 {
		var b [growStackBytes]byte
		return b[-i&(len(b)-1)]
	}
	return 0
}
