// Package inmem is an in-memory tier.Tier (and tier.Coordinator) for
// tests and examples: a map with expiry standing in for Redis, shared by
// several Caches to stand for several processes, plus switches that make it fail or stall
// so the read path's failure handling can be tested without a network. The
// failure tests against a real redis-server are in package redis.
package inmem

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// ErrInjected is the failure returned while a Tier is set to fail.
var ErrInjected = errors.New("inmem: injected failure")

// Tier is an in-memory shared tier. The zero value is not usable; call New.
type Tier struct {
	now func() time.Time

	mu       sync.Mutex
	items    map[string]item
	versions map[string]uint64 // invalidation versions (Coordinator)
	leases   map[string]lease
	hotSets  map[string]map[string]time.Time // shared hot sets: key → expiry (HotSharer)
	failing  error                           // returned by every call while non-nil
	stall    chan struct{}                   // while non-nil, calls block until it closes or ctx ends
	stallW   chan struct{}                   // the same, for Set only
	calls    Calls

	subscribers map[*subscriber]struct{} // Listen calls (stream.go)
	deaf        bool                     // announcements are lost (Deafen)
}

type item struct {
	value   []byte
	expires time.Time
}

// Calls counts the calls a Tier received.
type Calls struct {
	Gets, GetManys, Sets, Deletes int
	Versions, Leases, Releases    int
	Refills                       int // Refiller
	SmearedGets, SmearedSets      int // Smearing only
	HotShares                     int
}

var _ tier.Tier = (*Tier)(nil)

// New returns an empty Tier whose expiry follows now (time.Now when nil).
func New(now func() time.Time) *Tier {
	if now == nil {
		now = time.Now
	}
	return &Tier{now: now, items: make(map[string]item)}
}

// Fail makes every later call return err (nil heals the tier).
func (t *Tier) Fail(err error) {
	t.mu.Lock()
	t.failing = err
	t.mu.Unlock()
}

// Stall makes every later call block until the returned function is called or
// the call's context ends, like a frozen server that accepts requests and
// never answers.
func (t *Tier) Stall() (thaw func()) {
	ch := make(chan struct{})
	t.mu.Lock()
	t.stall = ch
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if t.stall == ch {
				t.stall = nil
			}
			t.mu.Unlock()
			close(ch)
		})
	}
}

// StallSets is Stall for Set calls only: reads answer, writes hang, as when
// a server fails between a read and the write that follows it.
func (t *Tier) StallSets() (thaw func()) {
	ch := make(chan struct{})
	t.mu.Lock()
	t.stallW = ch
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if t.stallW == ch {
				t.stallW = nil
			}
			t.mu.Unlock()
			close(ch)
		})
	}
}

// Calls returns how many calls of each kind the Tier received.
func (t *Tier) Calls() Calls {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls
}

// Raw returns the bytes stored under the qualified key, for tests.
func (t *Tier) Raw(key string) ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it, ok := t.items[key]
	if !ok || !t.now().Before(it.expires) {
		return nil, false
	}
	return it.value, true
}

// Put stores raw bytes under the qualified key, for tests that plant corrupt
// or foreign values.
func (t *Tier) Put(key string, value []byte, ttl time.Duration) {
	t.mu.Lock()
	t.items[key] = item{append([]byte(nil), value...), t.now().Add(ttl)}
	t.mu.Unlock()
}

// enter counts a call and applies the injected failure or stall.
func (t *Tier) enter(ctx context.Context, count *int) error {
	t.mu.Lock()
	*count++
	failing, stall := t.failing, t.stall
	if count == &t.calls.Sets && t.stallW != nil {
		stall = t.stallW
	}
	t.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if failing != nil {
		return failing
	}
	return ctx.Err()
}

// Get implements tier.Tier.
func (t *Tier) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := t.enter(ctx, &t.calls.Gets); err != nil {
		return nil, false, err
	}
	v, ok := t.Raw(key)
	return v, ok, nil
}

// GetMany implements tier.Tier.
func (t *Tier) GetMany(ctx context.Context, keys []string) ([]tier.Lookup, error) {
	if err := t.enter(ctx, &t.calls.GetManys); err != nil {
		return nil, err
	}
	out := make([]tier.Lookup, len(keys))
	for i, k := range keys {
		out[i].Value, out[i].Found = t.Raw(k)
	}
	return out, nil
}

// Set implements tier.Tier.
func (t *Tier) Set(ctx context.Context, items ...tier.Item) error {
	if err := t.enter(ctx, &t.calls.Sets); err != nil {
		return err
	}
	for _, it := range items {
		t.Put(it.Key, it.Value, it.TTL)
	}
	return nil
}

// Delete implements tier.Tier.
func (t *Tier) Delete(ctx context.Context, keys ...string) error {
	if err := t.enter(ctx, &t.calls.Deletes); err != nil {
		return err
	}
	t.mu.Lock()
	for _, k := range keys {
		delete(t.items, k)
	}
	t.mu.Unlock()
	return nil
}

// Close implements tier.Tier.
func (t *Tier) Close() error { return nil }

var _ tier.Coordinator = (*Tier)(nil)

// Version implements tier.Coordinator.
func (t *Tier) Version(ctx context.Context, key string) (uint64, error) {
	if err := t.enter(ctx, &t.calls.Versions); err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.versions[key], nil
}

// SetIfVersion implements tier.Coordinator.
func (t *Tier) SetIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	if err := t.enter(ctx, &t.calls.Sets); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.versions[it.Key] != version {
		return false, nil
	}
	t.items[it.Key] = item{append([]byte(nil), it.Value...), t.now().Add(it.TTL)}
	return true, nil
}

// Invalidate implements tier.Coordinator.
func (t *Tier) Invalidate(ctx context.Context, keys ...string) error {
	if err := t.enter(ctx, &t.calls.Deletes); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.versions == nil {
		t.versions = make(map[string]uint64)
	}
	for _, k := range keys {
		delete(t.items, k)
		t.versions[k]++
	}
	t.announce(ctx, keys)
	return nil
}

var _ tier.Refiller = (*Tier)(nil)

// Refill implements tier.Refiller.
func (t *Tier) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	if err := t.enter(ctx, &t.calls.Refills); err != nil {
		return false, nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.versions[it.Key] != 0 {
		return false, nil, nil
	}
	if cur, ok := t.items[it.Key]; ok && t.now().Before(cur.expires) {
		return false, append([]byte(nil), cur.value...), nil
	}
	t.items[it.Key] = item{append([]byte(nil), it.Value...), t.now().Add(it.TTL)}
	return true, nil, nil
}

// Restart empties the tier as a server restarted without its data would
// be: every value, version, lease and hot set is gone. The outage around
// it is the test's to make (Fail, Deafen and Hear).
func (t *Tier) Restart() {
	t.mu.Lock()
	t.items = make(map[string]item)
	t.versions = nil
	t.leases = nil
	t.hotSets = nil
	t.mu.Unlock()
}

// Lease implements tier.Coordinator.
func (t *Tier) Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if err := t.enter(ctx, &t.calls.Leases); err != nil {
		return false, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l, ok := t.leases[key]; ok && t.now().Before(l.expires) {
		return false, nil
	}
	if t.leases == nil {
		t.leases = make(map[string]lease)
	}
	t.leases[key] = lease{token, t.now().Add(ttl)}
	return true, nil
}

// Release implements tier.Coordinator.
func (t *Tier) Release(ctx context.Context, key, token string) error {
	if err := t.enter(ctx, &t.calls.Releases); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leases[key].token == token {
		delete(t.leases, key)
	}
	return nil
}

type lease struct {
	token   string
	expires time.Time
}
