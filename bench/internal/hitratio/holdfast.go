package hitratio

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/testhook"
)

// frozenClock is a holdfast.Clock that never moves: nothing expires during
// a replay, whatever its length, so a miss is a key's first request or one
// the store evicted.
type frozenClock struct{ t time.Time }

func (c frozenClock) Now() time.Time { return c.t }

// holdfastCache reads through a namespace of a Cache with no shared tier.
// Without one (and with no stale-if-error window or soft TTL below the TTL)
// the namespace keeps no last-known-good store, and its hot tier, every key
// admitted, is the only store holding values: a hit is a SourceHot answer.
type holdfastCache struct {
	c    *holdfast.Cache
	ns   *holdfast.Namespace
	load holdfast.Loader
	// loaded and joined count the misses: reads that ran the loader, and
	// reads that joined a load's flight (none, with awaitFlight).
	loaded, joined int
}

func newHoldfast(size Size, valueBytes int) (Cache, error) {
	c, err := holdfast.New(holdfast.Options{Clock: frozenClock{time.Unix(1_700_000_000, 0)}})
	if err != nil {
		return nil, err
	}
	ns, err := c.Namespace("hitratio", holdfast.Policy{
		TTL:              replayTTL,
		LoadErrorBackoff: -1, // no store of failed keys: no load fails here
		Hot:              holdfast.HotPolicy{TTL: replayTTL, MaxBytes: size.Bytes, Threshold: -1},
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	testhook.SeedHot(ns, size.Seed)
	load := func(_ context.Context, key string) ([]byte, error) {
		return value(key, valueBytes), nil
	}
	return &holdfastCache{c: c, ns: ns, load: load}, nil
}

func (h *holdfastCache) Access(key string) (bool, error) {
	res, err := h.ns.Get(context.Background(), key, h.load)
	if err != nil {
		return false, err
	}
	if n := min(len(key), len(res.Value)); !bytes.Equal(res.Value[:n], []byte(key[:n])) {
		return false, fmt.Errorf("holdfast: read of %q returned another key's value %q", key, res.Value)
	}
	switch {
	case res.Source == holdfast.SourceHot:
		return true, nil
	case res.Source == holdfast.SourceLoaded && !res.Collapsed:
		h.loaded++
	case res.Source == holdfast.SourceLoaded:
		h.joined++
	default:
		return false, fmt.Errorf("holdfast: read of %q answered from %v, with no shared tier or last-known-good", key, res.Source)
	}
	return false, h.awaitFlight(key)
}

// flightWait bounds the wait for a load's flight to end once its reader has
// its answer: the loading goroutine stores the value, answers, then leaves
// the flight, which takes microseconds unless the machine is very busy.
const flightWait = 5 * time.Second

// awaitFlight waits for key's flight to end. The reader is answered before
// the loading goroutine leaves the flight, and a request of the key meanwhile
// joins the flight (Result.Collapsed) instead of reading the store; a sequential
// client's next request should see the store as the load left it, so the
// replay waits, as it waits for theine's and ristretto's writes.
func (h *holdfastCache) awaitFlight(key string) error {
	deadline := time.Now().Add(flightWait)
	for testhook.Loading(h.ns, key) {
		if time.Now().After(deadline) {
			return fmt.Errorf("holdfast: the load of %q still in flight %v after its reader was answered", key, flightWait)
		}
		runtime.Gosched()
	}
	return nil
}

func (h *holdfastCache) Len() int { return int(h.ns.Stats().Get("hot.entries")) }

func (h *holdfastCache) Close() { h.c.Close() }

func (h *holdfastCache) stats() holdfast.Stats { return h.ns.Stats() }

// check holds a replay of requests with hits to what the namespace
// counted: every hit from the hot tier, a load for every miss, and no
// last-known-good store, so that the ratio measured is the hot tier's, the
// store that holds the values with no shared tier.
func (h *holdfastCache) check(hits, requests int) error {
	st := h.stats()
	switch {
	case st.Get("last_known_good.entries") != 0:
		return fmt.Errorf("holdfast: last-known-good holds %d keys: the hot tier is not the only store", st.Get("last_known_good.entries"))
	case st.Get("hot.hits") != uint64(hits):
		return fmt.Errorf("holdfast: %d hot-tier hits counted, %d seen", st.Get("hot.hits"), hits)
	case h.joined != 0:
		return fmt.Errorf("holdfast: %d reads joined a load's flight", h.joined)
	case st.Get("loads") != uint64(h.loaded) || h.loaded != requests-hits:
		return fmt.Errorf("holdfast: %d loads counted, %d seen, for %d misses", st.Get("loads"), h.loaded, requests-hits)
	}
	return nil
}
