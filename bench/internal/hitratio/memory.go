package hitratio

import (
	"fmt"
	"runtime"

	"github.com/holdfast-dev/holdfast/internal/memtest"
)

// HoldfastEntryCost is what holdfast's in-process store charges one entry
// of a KeyBytes-byte key and a valueBytes-byte value, read from the store's
// own count (Stats.HotBytes) after one read through a namespace: the
// store's cost function (local.Store.Cost) applied to what the namespace
// stores, its envelope included, whatever the store's implementation.
func HoldfastEntryCost(valueBytes int) (int64, error) {
	c, err := newHoldfast(Size{Bytes: 1 << 20}, valueBytes)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Access(Key(0)); err != nil {
		return 0, err
	}
	st := c.(*holdfastCache).stats()
	if st.Get("hot.entries") != 1 || st.Get("hot.bytes") == 0 {
		return 0, fmt.Errorf("hitratio: after one read holdfast's hot tier holds %d entries of %d bytes, not one", st.Get("hot.entries"), st.Get("hot.bytes"))
	}
	return int64(st.Get("hot.bytes")), nil
}

// fillFactor is how many distinct keys, per entry it may hold, a cache is
// filled with to see how many it holds: enough that each of a sharded
// store's shards is full, whatever the hashing.
const fillFactor = 4

// Holds builds a cache with con at size and fills it with fillFactor ×
// entries distinct keys, and returns how many entries it then holds:
// holdfast's store splits its budget evenly over its shards, each of
// which holds a whole number of entries, so a budget of exactly N entries
// may hold a few fewer.
func Holds(con Contender, size Size, entries, valueBytes int) (int, error) {
	c, err := con.New(size, valueBytes)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := fill(c, fillFactor*entries); err != nil {
		return 0, err
	}
	return c.Len(), nil
}

// BytesPerEntry builds a cache with con at size, reads n distinct keys
// through it, and returns the live heap it then takes (after two
// collections, construction included) over the entries it holds, and that
// count.
func BytesPerEntry(con Contender, size Size, n, valueBytes int) (float64, int, error) {
	base := memtest.LiveHeap()
	c, err := con.New(size, valueBytes)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	if err := fill(c, n); err != nil {
		return 0, 0, err
	}
	heap := memtest.LiveHeap() - base
	held := c.Len()
	runtime.KeepAlive(c)
	if held <= 0 {
		return 0, 0, fmt.Errorf("hitratio: %s holds no entries after %d reads", con.Name, n)
	}
	return float64(heap) / float64(held), held, nil
}

// fill reads n distinct keys through c.
func fill(c Cache, n int) error {
	for i := range n {
		if _, err := c.Access(Key(uint64(i))); err != nil {
			return err
		}
	}
	return nil
}
