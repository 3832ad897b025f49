package catalog

import "errors"

// Errors returned by a Store. Check them with errors.Is: stores wrap them
// with the operation and, for ErrInvalid, with what was wrong.
var (
	// ErrNotFound means no product has the given id.
	ErrNotFound = errors.New("catalog: not found")

	// ErrInvalid means the input was rejected before reaching the
	// database: a bad list query, a too-long prefix, a bad update, a
	// quantity below 1.
	ErrInvalid = errors.New("catalog: invalid input")

	// ErrConflict means the row changed underneath the caller: the
	// product's version was not the expected one, or Reserve lost the
	// race for the stock row MaxReserveAttempts times.
	ErrConflict = errors.New("catalog: version conflict")

	// ErrInsufficientStock means fewer units are available than were
	// asked for; nothing was reserved.
	ErrInsufficientStock = errors.New("catalog: insufficient stock")
)
