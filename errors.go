package holdfast

import (
	"errors"
	"fmt"
)

// Errors returned by the read path. Check them with errors.Is.
var (
	// ErrNotFound is returned by a Loader when the source has no value for a
	// key; the Cache stores that answer for the namespace's NegativeTTL
	// (unless it is negative) and returns ErrNotFound to its callers.
	ErrNotFound = errors.New("holdfast: not found")

	// ErrOverloaded is returned when the load limiter rejected a load and no
	// stale value could be served instead.
	ErrOverloaded = errors.New("holdfast: overloaded: load limit reached")

	// ErrTooLarge is returned when a key or value is over the configured size
	// limit; nothing is sent or stored.
	ErrTooLarge = errors.New("holdfast: too large")

	// ErrClosed is returned by calls made after Cache.Close.
	ErrClosed = errors.New("holdfast: cache closed")
)

// PanicError is the error every waiter of a shared load receives when the
// loader panicked. The process keeps running.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the loader goroutine's stack at the panic
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("holdfast: loader panicked: %v", e.Value)
}

// Unwrap returns the panic value when it was an error, so errors.Is and
// errors.As see through the panic.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
