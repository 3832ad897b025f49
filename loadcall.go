package holdfast

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// errLoaderExited is what the readers of a load get when the loader ended
// its goroutine without returning (runtime.Goexit, which t.FailNow calls in
// a test). Without it the flight would never finish and every later read of
// the key would wait on it until its own context ended.
var errLoaderExited = errors.New("holdfast: loader exited without returning (runtime.Goexit)")

// loadTimedOut is what the readers of a load get when its loader has not
// returned within the namespace's LoadTimeout. It wraps
// context.DeadlineExceeded.
func loadTimedOut(d time.Duration) error {
	return fmt.Errorf("loader did not return within LoadTimeout %v: %w", d, context.DeadlineExceeded)
}

// callBounded runs call on a goroutine of the Cache's and waits for it only
// until ctx is done: the readers of a load are answered when LoadTimeout
// passes, whatever the loader does with its context (a loader that ignores
// it would otherwise hold every reader of the key). A panic becomes a
// *PanicError and runtime.Goexit becomes errLoaderExited, so the flight
// always ends.
//
// done runs on that goroutine once call has really returned: the load's
// limiter slot is given back then, not at the timeout, so a source that
// stopped answering is not sent more concurrent calls than the limit. A late
// result is dropped. Close waits for the goroutine, as for every load.
func callBounded[R any](c *Cache, ctx context.Context, call func(context.Context) (R, error), done func()) (R, error) {
	type result struct {
		v   R
		err error
	}
	ch := make(chan result, 1) // buffered: a late result is dropped, not blocked on
	started := c.goOwned(func() {
		var r result
		returned := false
		defer func() {
			if !returned {
				r.err = errLoaderExited
			}
			if done != nil {
				done()
			}
			ch <- r
		}()
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			r.v, r.err = call(ctx)
		}()
		returned = true
	})
	var zero R
	if !started {
		if done != nil {
			done()
		}
		return zero, ErrClosed
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// The loader's result may be there at the same instant: prefer it.
			select {
			case r := <-ch:
				return r.v, r.err
			default:
			}
		}
		return zero, ctx.Err()
	}
}
