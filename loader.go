package holdfast

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// Loader reads a value from the source of truth (the database) when no tier
// has it. It returns ErrNotFound (possibly wrapped) when the source has no
// value for the key. ctx carries the values of the context of the read that
// started the load (trace ids, say), but none of its cancellation: it is
// bounded by the namespace's LoadTimeout and cancelled by Cache.Close. A
// type with a Load method passes it as a method value (store.Load).
type Loader func(ctx context.Context, key string) ([]byte, error)

// BatchLoader loads many keys in one call (one SQL query with IN (...), say).
// Keys absent from the returned map are not found.
type BatchLoader func(ctx context.Context, keys []string) (map[string][]byte, error)

// errNilLoader is the error of a read given no loader: a programming error,
// reported as such rather than as a loader panic.
var errNilLoader = errors.New("holdfast: nil loader")

// isNil reports whether l, a Loader or a BatchLoader, is nil.
func isNil(l any) bool {
	switch f := l.(type) {
	case nil:
		return true
	case Loader:
		return f == nil
	case BatchLoader:
		return f == nil
	}
	return false
}

// loadError is a failed load as its readers see it: the namespace and key,
// then the cause, whose own "holdfast: " prefix is not repeated.
type loadError struct {
	ns, key string
	err     error
}

func (e *loadError) Error() string {
	return fmt.Sprintf("holdfast: %s: load of %q: %s", e.ns, e.key, strings.TrimPrefix(e.err.Error(), "holdfast: "))
}

func (e *loadError) Unwrap() error { return e.err }

// source is the load stage's view of the loader: a Loader, for Get's
// flights and refreshes (one key), or a BatchLoader, for GetMany's. A value,
// not an interface, so a load allocates nothing for it.
type source struct {
	one  Loader
	many BatchLoader
}

// keysAnswer holds one value per key, in order, and the keys' own errors
// (nil when none has one).
type keysAnswer struct {
	vals [][]byte
	errs []error
}

// load calls the loader for keys; an error fails every key.
func (s source) load(ctx context.Context, keys []string) (keysAnswer, error) {
	if s.one != nil {
		v, err := s.one(ctx, keys[0])
		return keysAnswer{vals: [][]byte{v}}, err
	}
	m, err := s.many(ctx, keys)
	if err != nil {
		return keysAnswer{}, err
	}
	a := keysAnswer{vals: make([][]byte, len(keys))}
	for i, k := range keys {
		if v, ok := m[k]; ok {
			a.vals[i] = v
			continue
		}
		if a.errs == nil {
			a.errs = make([]error, len(keys))
		}
		a.errs[i] = ErrNotFound
	}
	return a, nil
}

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
	started := c.goLoad(ctx, func() {
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
