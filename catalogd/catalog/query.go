package catalog

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Sort names a list order. Only these values are accepted: a store maps each
// to a fixed ORDER BY clause, so no part of an ORDER BY ever comes from a
// request. Every order ends with the id, so pages never overlap or skip.
type Sort string

// The list orders.
const (
	// SortName orders by SearchKey(name), then id.
	SortName Sort = "name"
	// SortPrice orders by price, cheapest first, then id.
	SortPrice Sort = "price"
	// SortPriceDesc is exactly SortPrice reversed: dearest first, then
	// id descending, so one index serves both directions.
	SortPriceDesc Sort = "-price"
	// SortUpdated orders by the last update, most recent first, then id
	// descending.
	SortUpdated Sort = "updated"
)

// Valid reports whether s is one of the defined orders.
func (s Sort) Valid() bool {
	switch s {
	case SortName, SortPrice, SortPriceDesc, SortUpdated:
		return true
	}
	return false
}

// Bounds on list and search input. They keep a request from asking for an
// unbounded amount of work: a page of at most MaxPageSize rows at an offset
// of at most MaxPage*MaxPageSize, a prefix short enough to be a cache key.
const (
	DefaultPageSize    = 20
	MaxPageSize        = 100
	MaxPage            = 10_000
	MaxCategoryLen     = 64  // runes
	MaxNameLen         = 200 // runes
	MaxPrefixLen       = 64  // runes
	DefaultSearchLimit = 10
	MaxSearchLimit     = 50
	MaxPriceCents      = 100_000_000_000 // one billion in major units
)

// ListQuery selects one page of active products.
type ListQuery struct {
	Category string // exact category; empty for all
	Page     int    // from 1; 0 means 1
	Size     int    // 1..MaxPageSize; 0 means DefaultPageSize
	Sort     Sort   // one of the Sort constants; empty means SortName
}

// Normalize fills in the defaults and checks the bounds. It returns a query
// whose fields are all explicit, suitable as a cache key, or an error
// wrapping ErrInvalid.
func (q ListQuery) Normalize() (ListQuery, error) {
	if q.Page == 0 {
		q.Page = 1
	}
	if q.Size == 0 {
		q.Size = DefaultPageSize
	}
	if q.Sort == "" {
		q.Sort = SortName
	}
	switch {
	case q.Page < 1 || q.Page > MaxPage:
		return q, fmt.Errorf("%w: page %d is not in 1..%d", ErrInvalid, q.Page, MaxPage)
	case q.Size < 1 || q.Size > MaxPageSize:
		return q, fmt.Errorf("%w: size %d is not in 1..%d", ErrInvalid, q.Size, MaxPageSize)
	case !q.Sort.Valid():
		return q, fmt.Errorf("%w: sort %q is not one of name, price, -price, updated", ErrInvalid, q.Sort)
	}
	if err := checkText("category", q.Category, MaxCategoryLen); err != nil {
		return q, err
	}
	return q, nil
}

// Offset is the number of rows before the page. It assumes a normalized
// query.
func (q ListQuery) Offset() int { return (q.Page - 1) * q.Size }

// Validate checks an update before it reaches the database, returning an
// error wrapping ErrInvalid.
func (u ProductUpdate) Validate() error {
	if strings.TrimSpace(u.Name) == "" {
		return fmt.Errorf("%w: name is empty", ErrInvalid)
	}
	if err := checkText("name", u.Name, MaxNameLen); err != nil {
		return err
	}
	if strings.TrimSpace(u.Category) == "" {
		return fmt.Errorf("%w: category is empty", ErrInvalid)
	}
	if err := checkText("category", u.Category, MaxCategoryLen); err != nil {
		return err
	}
	if u.PriceCents < 0 || u.PriceCents > MaxPriceCents {
		return fmt.Errorf("%w: price_cents %d is not in 0..%d", ErrInvalid, u.PriceCents, int64(MaxPriceCents))
	}
	if !u.Status.Valid() {
		return fmt.Errorf("%w: status %q is not one of active, hidden, discontinued", ErrInvalid, u.Status)
	}
	return nil
}

// checkText rejects what a database would choke on or a request should not
// send: invalid UTF-8 (PostgreSQL refuses it, SQLite would store it), NUL
// (PostgreSQL text cannot hold it) and over-long strings.
func checkText(field, s string, max int) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, field)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains NUL", ErrInvalid, field)
	case utf8.RuneCountInString(s) > max:
		return fmt.Errorf("%w: %s is longer than %d characters", ErrInvalid, field, max)
	}
	return nil
}

// SearchKey is the form in which names and codes are compared with a search
// prefix: lower-cased by Go's Unicode tables. The stores keep it in a column
// computed here, not by the database's lower(), because SQLite's lower()
// folds only ASCII and PostgreSQL's depends on the database locale; one Go
// function makes both stores, and the cache key, agree.
func SearchKey(s string) string { return strings.ToLower(s) }

// NormalizePrefix turns a user's search input into the prefix a store
// searches for and the cache keys on: leading white space dropped, then
// SearchKey. Trailing space is kept: "red " and "red" ask different things.
// It returns an error wrapping ErrInvalid for input that is not valid UTF-8,
// contains NUL or is longer than MaxPrefixLen runes after trimming.
func NormalizePrefix(s string) (string, error) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if err := checkText("prefix", s, MaxPrefixLen); err != nil {
		return "", err
	}
	return SearchKey(s), nil
}

// SearchLimit clamps a requested result count: below 1 means
// DefaultSearchLimit, above MaxSearchLimit means MaxSearchLimit.
func SearchLimit(n int) int {
	switch {
	case n < 1:
		return DefaultSearchLimit
	case n > MaxSearchLimit:
		return MaxSearchLimit
	}
	return n
}

// PrefixRange returns the half-open range [lo, hi) of strings, in byte
// order, that start with the normalized prefix p: lo is p itself and hi is p
// with its last rune incremented. Byte order on UTF-8 is code point order, so
// "key >= lo AND key < hi" selects exactly the keys with prefix p and is an
// index range scan in both SQLite (BINARY collation) and PostgreSQL (a
// COLLATE "C" column). Unlike LIKE 'p%', it needs no escaping of % and _, and
// PostgreSQL can use the index with a bound parameter. bounded is false when
// no string is above the range (p is all U+10FFFF), and then only lo applies.
func PrefixRange(p string) (lo, hi string, bounded bool) {
	runes := []rune(p)
	for i := len(runes) - 1; i >= 0; i-- {
		r := runes[i]
		if r >= utf8.MaxRune {
			continue // no successor: drop it and increment the rune before
		}
		r++
		if r == 0xD800 { // surrogates are not valid in UTF-8: skip them
			r = 0xE000
		}
		return p, string(runes[:i]) + string(r), true
	}
	return p, "", false
}
