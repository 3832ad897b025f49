package hitratio

import (
	"fmt"
	"strings"
	"time"
)

// A Cache is one cache under test, holding string keys and byte values.
type Cache interface {
	// Access reads key through the cache, storing the key's value on a
	// miss, and reports whether it was a hit.
	Access(key string) (hit bool, err error)
	// Len is how many entries the cache holds now.
	Len() int
	Close()
}

// Size is the room a cache is given: holdfast's store is bounded in bytes,
// every other cache here in entries.
type Size struct {
	Entries int
	Bytes   int64
	// Seed seeds the hash of a cache that takes one (holdfast's store:
	// which keys share a shard or a sketch counter), so that a replay
	// gives the same figure in every run.
	Seed uint64
}

// A Contender names a cache and builds it.
type Contender struct {
	Name string
	// ByBytes is set for a cache sized by Size.Bytes; the others are
	// sized by Size.Entries.
	ByBytes bool
	New     func(size Size, valueBytes int) (Cache, error)
}

// HoldfastName is holdfast's column.
const HoldfastName = "holdfast"

// Contenders are the caches compared, holdfast first.
func Contenders() []Contender {
	return []Contender{
		{Name: HoldfastName, ByBytes: true, New: newHoldfast},
		{Name: "otter", New: newOtter},
		{Name: "theine", New: newTheine},
		{Name: "ristretto", New: newRistretto},
		{Name: "sturdyc", New: newSturdyc},
		{Name: "lru", New: newLRU},
	}
}

// replayTTL outlasts any replay, for the caches that need a time to live
// (holdfast, sturdyc); their clocks are fakes that move little or not at
// all.
const replayTTL = 24 * time.Hour

// KeyBytes is the length of every key: a uint64 in 16 hex digits, so that
// every entry of a run has one shape and costs holdfast's store alike.
const KeyBytes = 16

// Key is the cache key of trace key k.
func Key(k uint64) string {
	const digits = "0123456789abcdef"
	var b [KeyBytes]byte
	for i := KeyBytes - 1; i >= 0; i-- {
		b[i] = digits[k&15]
		k >>= 4
	}
	return string(b[:])
}

// value is key's value: valueBytes bytes starting with the key, so that a
// read can tell its own value from another key's. Each call allocates, as a
// loader's answer would: a cache holds its own copy.
func value(key string, valueBytes int) []byte {
	v := make([]byte, valueBytes)
	copy(v, key)
	return v
}

// SelectContenders returns the contenders named, in Contenders' order, or
// all of them for no names.
func SelectContenders(names []string) ([]Contender, error) {
	all := Contenders()
	if len(names) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[strings.TrimSpace(n)] = true
	}
	var out []Contender
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
			delete(want, c.Name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("hitratio: no cache %q", n)
	}
	return out, nil
}
