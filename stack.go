package holdfast

// A read that misses the hot tier runs about 6 KiB deep by the time it is
// in the shared tier's client (flight, lookup, the tier's routing and
// guard, rueidis's pipeline). A goroutine starts with a 2 KiB stack, and a
// server's request goroutine is often new: on the way down its stack is
// copied twice, the second time with a dozen frames to adjust, which costs
// about four times the rest of an in-memory shared-tier hit
// (BenchmarkGetSharedHitFresh: 8-10 µs a read on a fresh goroutine, 2 µs
// on a reused one; 3-4 µs with growStack).
// growStack, called before the descent, makes the runtime size the stack
// for it at once, while few frames are on it.

// growStackBytes is growStack's frame: with the stack guard and the
// caller's frames it takes a 2 KiB stack to 8 KiB in one copy.
const growStackBytes = 5 << 10

// growStack grows the calling goroutine's stack, once, to hold a read past
// the hot tier; on a stack that holds it already it costs the clearing of
// its frame (tens of nanoseconds). It returns a byte of the frame, always
// 0, so that the frame is not optimised away; i is any index.
//
//go:noinline
func growStack(i int) byte {
	var b [growStackBytes]byte
	return b[i&(len(b)-1)]
}
