package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/tierdriver"
	"github.com/holdfast-dev/holdfast/tier"
)

// Lazy is a Tier that connects in the background, so that a service can
// start while Redis is down (a restart during a Redis outage must not make
// the outage an outage of the service). Until the first connection succeeds
// every call returns at once with an error wrapping tier.ErrBypassed:
// the Cache then serves from its own tiers and the loader, and queues its
// invalidations for replay, as it does while a breaker is open. Once
// connected, Lazy is the Tier.
type Lazy struct {
	driver // the Lazy itself as lazyDriver: the methods the Cache calls
	opts   Options
	tier   atomic.Pointer[Tier]
	// reason is reasonOf the last failed attempt to connect (see Health).
	reason atomic.Value
	stop   chan struct{}
	done   chan struct{}
}

// lazyDriver is Lazy with the methods the Cache calls.
type lazyDriver Lazy

var _ tierdriver.Driver = (*lazyDriver)(nil)

// NewLazy validates opts and starts connecting in the background, retrying
// with jittered exponential backoff from 250 ms to 10 s until it succeeds
// or Close is called.
func NewLazy(opts Options) (*Lazy, error) {
	if _, _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	o, _, _ := opts.withDefaults()
	l := &Lazy{opts: opts, stop: make(chan struct{}), done: make(chan struct{})}
	l.driver = (*lazyDriver)(l)
	go l.connect(&failureLog{log: o.Logger, now: o.Clock.Now})
	return l, nil
}

// connect retries New until it succeeds. Its configuration errors go to
// flog, which the Tier keeps, so that a password refused by every attempt
// and then by every call is one line a minute in all.
func (l *Lazy) connect(flog *failureLog) {
	defer close(l.done)
	wait := 250 * time.Millisecond
	for {
		t, err := connectTier(l.opts, flog)
		if err == nil {
			l.tier.Store(t)
			return
		}
		l.reason.Store(reasonOf(err))
		// Full jitter: many instances restarted together must not retry
		// in step.
		timer := time.NewTimer(time.Duration(rand.Int64N(int64(wait))) + wait/2)
		select {
		case <-l.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// Tier returns the connected Tier, or nil while still connecting.
func (l *Lazy) Tier() *Tier { return l.tier.Load() }

// WaitConnected waits until the Tier is connected or ctx ends.
func (l *Lazy) WaitConnected(ctx context.Context) error {
	for {
		if l.tier.Load() != nil {
			return nil
		}
		select {
		case <-l.done:
			if l.tier.Load() == nil {
				return fmt.Errorf("redis tier: closed before connecting")
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var errNotConnected = fmt.Errorf("redis tier not connected yet: %w", tier.ErrBypassed)

// Get implements tier.Tier.
func (d *lazyDriver) Get(ctx context.Context, key string) ([]byte, bool, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Get(ctx, key)
	}
	return nil, false, errNotConnected
}

// GetVersioned implements tier.VersionedGetter.
func (d *lazyDriver) GetVersioned(ctx context.Context, key string) tier.VersionedLookup {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.GetVersioned(ctx, key)
	}
	return tier.VersionedLookup{Lookup: tier.Lookup{Err: errNotConnected}}
}

// GetMany implements tier.Tier.
func (d *lazyDriver) GetMany(ctx context.Context, keys []string) ([]tier.Lookup, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.GetMany(ctx, keys)
	}
	return nil, errNotConnected
}

// Set implements tier.Tier.
func (d *lazyDriver) Set(ctx context.Context, items ...tier.Item) error {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Set(ctx, items...)
	}
	return errNotConnected
}

// Delete implements tier.Tier.
func (d *lazyDriver) Delete(ctx context.Context, keys ...string) error {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Delete(ctx, keys...)
	}
	return errNotConnected
}

// Version implements tier.Coordinator.
func (d *lazyDriver) Version(ctx context.Context, key string) (uint64, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Version(ctx, key)
	}
	return 0, errNotConnected
}

// SetIfVersion implements tier.Coordinator.
func (d *lazyDriver) SetIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.SetIfVersion(ctx, it, version)
	}
	return false, errNotConnected
}

// Refill implements tier.Refiller.
func (d *lazyDriver) Refill(ctx context.Context, it tier.Item) (bool, []byte, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Refill(ctx, it)
	}
	return false, nil, errNotConnected
}

// RefillOver implements tier.OverRefiller.
func (d *lazyDriver) RefillOver(ctx context.Context, it tier.Item, over []byte) (bool, []byte, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.RefillOver(ctx, it, over)
	}
	return false, nil, errNotConnected
}

// Invalidate implements tier.Coordinator.
func (d *lazyDriver) Invalidate(ctx context.Context, keys ...string) error {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Invalidate(ctx, keys...)
	}
	return errNotConnected
}

// Lease implements tier.Coordinator.
func (d *lazyDriver) Lease(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Lease(ctx, key, token, ttl)
	}
	return false, errNotConnected
}

// Release implements tier.Coordinator.
func (d *lazyDriver) Release(ctx context.Context, key, token string) error {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Release(ctx, key, token)
	}
	return errNotConnected
}

// Listen implements tier.InvalidationStream: nothing is heard until
// connected (the Cache treats that as a gap), then the Tier's stream.
func (d *lazyDriver) Listen(ctx context.Context, ls tier.Listener) {
	l := (*Lazy)(d)
	for {
		if t := l.tier.Load(); t != nil {
			t.Listen(ctx, ls)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-l.done:
		case <-time.After(50 * time.Millisecond):
		}
		if l.tier.Load() == nil {
			select {
			case <-l.stop:
				<-ctx.Done()
				return
			default:
			}
		}
	}
}

// Close stops connecting and closes the Tier if it connected.
func (l *Lazy) Close() error {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	if t := l.tier.Load(); t != nil {
		return t.Close()
	}
	return nil
}

// Copies implements tier.Smearer: 1 until connected.
func (d *lazyDriver) Copies() int {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Copies()
	}
	return 1
}

// GetSmeared implements tier.Smearer.
func (d *lazyDriver) GetSmeared(ctx context.Context, key string) ([]byte, bool, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.GetSmeared(ctx, key)
	}
	return nil, false, errNotConnected
}

// SetSmearedIfVersion implements tier.Smearer.
func (d *lazyDriver) SetSmearedIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.SetSmearedIfVersion(ctx, it, version)
	}
	return false, errNotConnected
}

// ShareHot implements tier.HotSharer.
func (d *lazyDriver) ShareHot(ctx context.Context, set string, keys []string, ttl time.Duration, limit int) ([]string, error) {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.ShareHot(ctx, set, keys, ttl, limit)
	}
	return nil, errNotConnected
}
