package hitratio

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/Yiling-J/theine-go"
	"github.com/dgraph-io/ristretto/v2"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/maypok86/otter/v2"
	"github.com/viccon/sturdyc"
)

// peer is a Cache over a cache with a get and a set, as every cache here
// but holdfast is: a read that misses sets the key's value.
type peer struct {
	get        func(key string) bool
	set        func(key string, v []byte)
	len        func() int
	close      func()
	valueBytes int
}

func (p *peer) Access(key string) (bool, error) {
	if p.get(key) {
		return true, nil
	}
	p.set(key, value(key, p.valueBytes))
	return false, nil
}

func (p *peer) Len() int { return p.len() }

func (p *peer) Close() {
	if p.close != nil {
		p.close()
	}
}

func newOtter(size Size, valueBytes int) (Cache, error) {
	c, err := otter.New(&otter.Options[string, []byte]{
		MaximumSize:     size.Entries,
		InitialCapacity: size.Entries,
		// Maintenance (eviction, the sketch's updates) runs in the
		// writer's goroutine, not a new one, so that it is done before
		// the next request, as in otter's own simulator.
		Executor: func(fn func()) { fn() },
	})
	if err != nil {
		return nil, err
	}
	return &peer{
		get:        func(k string) bool { _, ok := c.GetIfPresent(k); return ok },
		set:        func(k string, v []byte) { c.Set(k, v) },
		len:        c.EstimatedSize,
		valueBytes: valueBytes,
	}, nil
}

func newTheine(size Size, valueBytes int) (Cache, error) {
	c, err := theine.NewBuilder[string, []byte](int64(size.Entries)).Build()
	if err != nil {
		return nil, err
	}
	return &peer{
		get: func(k string) bool { _, ok := c.Get(k); return ok },
		set: func(k string, v []byte) {
			c.Set(k, v, 1)
			// Theine applies writes to its policy on a goroutine of
			// its own; Wait drains them, so that each eviction
			// happens before the next request.
			c.Wait()
		},
		len:        c.Len,
		close:      c.Close,
		valueBytes: valueBytes,
	}, nil
}

// newRistretto sets on a miss and waits for the set to be applied.
// Ristretto's admission is asynchronous and its Get buffers lossy (a
// buffer's accesses reach the frequency sketch only when it fills, and one
// found busy is dropped): Wait makes each set's admission or rejection
// happen before the next request, but the sketch's counts still arrive in
// batches, so its figures move a little from run to run.
func newRistretto(size Size, valueBytes int) (Cache, error) {
	// Ristretto counts its entries only with its metrics on, which would
	// add their own memory to its bytes an entry: Len is the sets that went
	// through less the evictions and rejections since.
	var added, gone atomic.Int64
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		// Ten counters an entry and 64-item Get buffers, as ristretto's
		// README advises; each entry costs 1.
		NumCounters:        int64(10 * size.Entries),
		MaxCost:            int64(size.Entries),
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnEvict:            func(*ristretto.Item[[]byte]) { gone.Add(1) },
		OnReject:           func(*ristretto.Item[[]byte]) { gone.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	return &peer{
		get: func(k string) bool { _, ok := c.Get(k); return ok },
		set: func(k string, v []byte) {
			if c.Set(k, v, 1) {
				added.Add(1)
			}
			c.Wait()
		},
		len:        func() int { return int(added.Load() - gone.Load()) },
		close:      c.Close,
		valueBytes: valueBytes,
	}, nil
}

// sturdycEvictPercent is the share of a full shard sturdyc evicts at once,
// the soonest to expire: 10 as in its README and otter's simulator.
const sturdycEvictPercent = 10

func newSturdyc(size Size, valueBytes int) (Cache, error) {
	if size.Entries <= 0 {
		return nil, fmt.Errorf("sturdyc: capacity %d: must be above 0", size.Entries)
	}
	// One shard, so that the cache holds the whole capacity (each shard
	// gets capacity/shards) and its eviction is measured, not its
	// sharding; a ticking clock, so that expiries, its eviction order,
	// are distinct (a frozen one would tie them all); no background
	// eviction.
	c := sturdyc.New[[]byte](size.Entries, 1, replayTTL, sturdycEvictPercent,
		sturdyc.WithNoContinuousEvictions(), sturdyc.WithClock(&tickingClock{}))
	return &peer{
		get:        func(k string) bool { _, ok := c.Get(k); return ok },
		set:        func(k string, v []byte) { c.Set(k, v) },
		len:        c.Size,
		valueBytes: valueBytes,
	}, nil
}

// tickingClock is a sturdyc.Clock that moves a nanosecond each time it is
// read, from a fixed start: entries set in turn get increasing expiries, in
// every run alike. Its tickers and timers never fire.
type tickingClock struct{ n atomic.Int64 }

var tickingStart = time.Unix(1_700_000_000, 0)

func (c *tickingClock) Now() time.Time { return tickingStart.Add(time.Duration(c.n.Add(1))) }

func (c *tickingClock) NewTicker(time.Duration) (<-chan time.Time, func()) {
	return make(chan time.Time), func() {}
}

func (c *tickingClock) NewTimer(time.Duration) (<-chan time.Time, func() bool) {
	return make(chan time.Time), func() bool { return true }
}

func (c *tickingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func newLRU(size Size, valueBytes int) (Cache, error) {
	c, err := lru.New[string, []byte](size.Entries)
	if err != nil {
		return nil, err
	}
	return &peer{
		get:        func(k string) bool { _, ok := c.Get(k); return ok },
		set:        func(k string, v []byte) { c.Add(k, v) },
		len:        c.Len,
		valueBytes: valueBytes,
	}, nil
}
