// Package memtest measures the live heap that in-process stores take, for
// the tests and benchmarks that hold them to their byte budgets.
package memtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/holdfast-dev/holdfast"
)

// LiveHeap is the heap in use after two collections: the second frees what
// the first could not (finalizers, objects its sweep left).
func LiveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// Fill calls read with batches of new keys, all of one length so that
// entries of one value size cost alike, until a round of them leaves the
// count entries returns grown by less than 1% (the stores are at their
// budgets and evicting), then with as many keys again: a store that has
// run a while, its index's deletes included, not one filled once (the
// sync.Map the stores once used took about 20 bytes an entry more once it
// had replaced its entries, and no more after twenty replacements than
// after one). It returns how many keys it read.
func Fill(read func(keys []string) error, entries func() int) (int, error) {
	next, batch := 0, make([]string, 256)
	readBatch := func() error {
		for i := range batch {
			batch[i] = fmt.Sprintf("q:%010d", next)
			next++
		}
		return read(batch)
	}
	last := 0
	for {
		for range max(4, last/8/len(batch)) {
			if err := readBatch(); err != nil {
				return next, err
			}
		}
		n := entries()
		if n <= last+last/100 {
			break
		}
		last = n
	}
	for range last / len(batch) {
		if err := readBatch(); err != nil {
			return next, err
		}
	}
	return next, nil
}

// FillNamespace fills ns's stores (Fill) with values of valueSize bytes read
// through GetMany, a quarter of the time of one Get per key. ns must keep
// last-known-good, the larger store and the last to fill.
func FillNamespace(ns *holdfast.Namespace, valueSize int) error {
	v := make([]byte, valueSize)
	load := func(_ context.Context, keys []string) (map[string][]byte, error) {
		vals := make(map[string][]byte, len(keys))
		for _, k := range keys {
			vals[k] = v
		}
		return vals, nil
	}
	_, err := Fill(func(keys []string) error {
		_, errs := ns.GetMany(context.Background(), keys, load)
		return errors.Join(errs...)
	}, func() int { return int(ns.Stats().Get("last_known_good.entries")) })
	return err
}
