package holdfast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/observe"
)

// Source says which tier answered a read. Why an answer is not a fresh one
// from the usual tier is its Reason; whether it is past its soft time is
// Result.Stale.
type Source uint8

const (
	// SourceHot: this process's hot tier.
	SourceHot Source = iota + 1
	// SourceShared: the shared tier, in this read or in the flight it
	// joined.
	SourceShared
	// SourceLoaded: the loader, run for this read or for the one it waited
	// for (Result.Collapsed tells them apart, so a count of SourceLoaded
	// answers without Collapsed is a count of loads).
	SourceLoaded
	// SourceMemory: this process's last-known-good store, the copies it
	// read or loaded last. With a shared tier the Reason says why it
	// answered; without one it is the tier below the hot one.
	SourceMemory
)

// sourceNames are the Sources' names; the zero Source, on a read that
// failed, is "none".
var sourceNames = [...]string{"none", "hot", "shared", "loaded", "memory"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", s)
}

// Reason says why a read was answered as it was when that is not a fresh
// value from the tier that normally answers: the zero Reason ("none") is a
// normal answer, fresh or a cached not-found.
type Reason uint8

const (
	// ReasonRevalidating: a value past its soft time but within its hard
	// time, served at once while one refresh runs
	// (stale-while-revalidate).
	ReasonRevalidating Reason = iota + 1
	// ReasonTierDown: from memory because the shared tier failed this
	// read, for a key the hot tier does not hold; past its soft time
	// while its refresh runs, the value is Stale.
	ReasonTierDown
	// ReasonTierSlow: from memory because the shared tier had not
	// answered within the slow-read delay (Policy.SlowReadGrace): a value
	// within its hard time, or past it within its stale-if-error window
	// while the tier is failing. The read goes on and its answer is
	// stored as usual.
	ReasonTierSlow
	// ReasonPeerLoading: from memory while another process holds the
	// key's lease and loads it, because no invalidation has superseded
	// this process's copy: it is the key's current value.
	ReasonPeerLoading
	// ReasonSourceSlow: a value past its hard time, within its
	// stale-if-error window, served because its load had not answered
	// within Policy.SlowLoadGrace; the load goes on and stores its value.
	ReasonSourceSlow
	// ReasonSourceFailed: a stale value (within its hard time, or past it
	// within the stale-if-error window) served because the load failed or
	// timed out, or because the key's last load failed and its retry is
	// not due (Policy.LoadErrorBackoff). Result.LoadErr says why.
	ReasonSourceFailed
	// ReasonOverloaded: a stale value served because the load limiter
	// refused the load (ErrOverloaded in Result.LoadErr).
	ReasonOverloaded
)

// reasonNames are the Reasons' names, for logs, headers and metric labels.
var reasonNames = [...]string{"none", "revalidating", "tier-down", "tier-slow", "peer-loading", "source-slow", "source-failed", "overloaded"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// Result is a value and how it was served. Value is shared with the cache and
// with other readers: it must not be modified.
type Result struct {
	Value []byte
	// Source is the tier that answered.
	Source Source
	// Reason is why the answer is not a fresh one from the usual tier;
	// zero for a normal answer.
	Reason Reason
	// NotFound is set, with the error ErrNotFound, when the answer is that the
	// source has no value for the key (cached or just loaded).
	NotFound bool
	// Collapsed is set when this read waited for another read's fetch
	// (RFC 9211's "collapsed").
	Collapsed bool
	// pastSoft is set on an answer served past its soft time, as decided
	// by the read that served it. Beside the other flags, which keeps a
	// Result to 72 bytes.
	pastSoft bool
	// LoadErr is why a stale value answered instead of a loaded one: the
	// load failed, timed out or was refused by the load limiter, or the
	// key's last load failed and its retry is not due (LoadErrorBackoff).
	// It is the error the read would have returned had nothing stale been
	// there (errors.Is sees the loader's error through it). Nil on every
	// other answer, stale-while-revalidate ones included while their
	// refresh has not failed.
	LoadErr error
	// origin, soft and hard are Unix nanoseconds: a hit copies three words,
	// not three time.Time values.
	origin, soft, hard int64
}

// Origin is when the value was read from the source (see tier.Entry).
func (r Result) Origin() time.Time { return time.Unix(0, r.origin) }

// Soft is when the value stops being fresh.
func (r Result) Soft() time.Time { return time.Unix(0, r.soft) }

// Hard is when the value may no longer be served as current.
func (r Result) Hard() time.Time { return time.Unix(0, r.hard) }

// Stale reports whether the value was served past its soft time.
func (r Result) Stale() bool { return r.pastSoft }

// Cache is a read-through cache of namespaces. Create one with New; it is safe
// for concurrent use. Close stops its background refreshes.
type Cache struct {
	opts       Options
	caps       tierCaps // what opts.Shared can do
	recorder   atomic.Pointer[recorderBox]
	clock      Clock        // opts.Clock, or the system clock
	coarse     *coarseClock // non-nil when opts.Clock is nil
	limit      *limiter
	ctx        context.Context // parent of every load; cancelled by Close
	cancel     context.CancelFunc
	loads      sync.WaitGroup // owned goroutines: flights, refreshes, loops
	idle       chan task      // work for an idle owned goroutine (goOwned)
	idlers     atomic.Int32   // owned goroutines waiting on idle
	closing    sync.Once
	closeClock sync.Once

	mu         sync.Mutex
	namespaces map[string]*Namespace
	closed     atomic.Bool // set under mu; read without it on the miss path

	// replayQueued tells the replay loop that a delete was queued for it.
	replayQueued chan struct{}

	stream streamState  // with a tier.InvalidationStream
	shared sharedHealth // the shared tier's recent latency and failures
	id     string       // this Cache's identity in announcements (tier.WithOrigin)
}

// New returns a Cache configured by opts, or an error if opts is invalid.
// With a shared tier that has an invalidation stream, it waits up to 250 ms
// for the stream to be first heard.
func New(opts Options) (*Cache, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		opts:       opts,
		clock:      opts.Clock,
		limit:      newLimiter(opts.MaxConcurrentLoads, opts.LoadWait),
		ctx:        ctx,
		cancel:     cancel,
		namespaces: make(map[string]*Namespace),
		id:         newLeaseToken(),

		replayQueued: make(chan struct{}, 1),
		idle:         make(chan task),
	}
	if c.clock == nil {
		c.clock = systemClock{}
		c.coarse = startCoarseClock()
	}
	if opts.Shared != nil {
		c.caps = probeTier(opts.Shared)
		// A tier that has not connected yet cannot say what it can do:
		// watchHealth logs that once it has.
		connected := c.caps.health == nil || c.caps.health.Health().Connected
		if connected {
			c.logCapabilities()
		}
		if hr := c.caps.health; hr != nil {
			c.goOwned(func() { c.watchHealth(hr, connected) })
		}
		c.goOwned(c.replayInvalidations)
	}
	if sharer := c.caps.share; sharer != nil {
		c.goOwned(func() { c.shareHotKeys(sharer) })
	}
	if stream := c.caps.stream; stream != nil {
		// Until the stream is first heard, nothing this process stores
		// has been checked against an announcement: that is a gap too.
		c.stream.resumed = make(chan struct{}, 1)
		c.stream.lost = make(chan struct{}, 1)
		c.stream.heard.Store(c.clock.Now().UnixNano())
		c.stream.gap.Store(true)
		c.stream.first = make(chan struct{})
		c.goOwned(func() { c.listen(stream) })
		// The copies read before the stream is first heard are dropped
		// then (stream.go): a Cache whose stream answers at once starts
		// heard, one whose tier is out starts without waiting long.
		t := time.NewTimer(streamFirstWait)
		select {
		case <-c.stream.first:
		case <-t.C:
		}
		t.Stop()
	}
	return c, nil
}

// now returns the time in Unix nanoseconds for expiry decisions: the coarse
// clock's word, or the injected clock.
func (c *Cache) now() int64 {
	if c.coarse != nil {
		return c.coarse.load()
	}
	return c.clock.Now().UnixNano()
}

// Namespace creates the namespace name with policy p. Names are 1 to 64
// characters of a-z, 0-9, '_', '-' and '.', so that "<namespace>:<key>" keys
// in a shared tier cannot collide across namespaces. Creating a name twice is
// an error.
func (c *Cache) Namespace(name string, p Policy) (*Namespace, error) {
	if err := validNamespace(name); err != nil {
		return nil, err
	}
	p, err := p.withDefaults()
	if err == nil {
		err = c.checkCapabilities(p)
	}
	if err != nil {
		return nil, fmt.Errorf("namespace %q: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if _, dup := c.namespaces[name]; dup {
		return nil, fmt.Errorf("holdfast: namespace %q already exists", name)
	}
	ns := newNamespace(c, name, p)
	c.namespaces[name] = ns
	if sharer := c.caps.share; sharer != nil && ns.p.Hot.Share && ns.hot != nil && !ns.p.Hot.NoWarmStart {
		c.goOwnedLocked(func() { ns.warmStart(sharer) })
	}
	return ns, nil
}

func validNamespace(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return fmt.Errorf("holdfast: namespace name %q must be 1 to 64 characters", name)
	}
	for i := 0; i < len(name); i++ {
		switch ch := name[i]; {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9', ch == '_', ch == '-', ch == '.':
		default:
			return fmt.Errorf("holdfast: namespace name %q has %q; use a-z, 0-9, '_', '-', '.'", name, ch)
		}
	}
	return nil
}

// Stats returns a snapshot of every namespace's counters, by name.
func (c *Cache) Stats() map[string]Stats {
	c.mu.Lock()
	nss := make([]*Namespace, 0, len(c.namespaces))
	for _, ns := range c.namespaces {
		nss = append(nss, ns)
	}
	c.mu.Unlock()
	out := make(map[string]Stats, len(nss))
	for _, ns := range nss {
		out[ns.name] = ns.Stats()
	}
	return out
}

// Namespaces returns the names of the namespaces, sorted.
func (c *Cache) Namespaces() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.namespaces))
	for n := range c.namespaces {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close cancels loads and background refreshes, waits for them to return,
// and makes later reads fail with ErrClosed. It does not close the shared
// tier, which the caller owns.
func (c *Cache) Close() error {
	c.closing.Do(func() {
		c.mu.Lock()
		c.closed.Store(true)
		c.mu.Unlock()
		c.cancel()
	})
	c.loads.Wait()
	if c.coarse != nil {
		c.closeClock.Do(c.coarse.close)
	}
	return nil
}

// recorderBox holds the Recorders for an atomic pointer.
type recorderBox struct{ rs []observe.Recorder }

// SetRecorder adds a Recorder that receives load latencies, for an exporter
// set up after New. A Cache takes one Recorder of each type (a Prometheus
// exporter and an OpenTelemetry one, say): a second of a type it has is an
// error, so that an exporter registered twice never silently counts twice.
func (c *Cache) SetRecorder(r observe.Recorder) error {
	if r == nil {
		return errors.New("holdfast: SetRecorder(nil)")
	}
	for {
		old := c.recorder.Load()
		var rs []observe.Recorder
		if old != nil {
			for _, have := range old.rs {
				if reflect.TypeOf(have) == reflect.TypeOf(r) {
					return fmt.Errorf("holdfast: the cache has a Recorder of type %T already", r)
				}
			}
			rs = append(rs, old.rs...)
		}
		if c.recorder.CompareAndSwap(old, &recorderBox{append(rs, r)}) {
			return nil
		}
	}
}

// goOwned runs fn on a goroutine that Close waits for. It reports false, and
// does not run fn, once the cache is closing.
func (c *Cache) goOwned(fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goOwnedLocked(fn)
}

// goLoad is goOwned for a load, a refresh or a loader call: fn runs under
// the pprof labels of ctx, those of the reader whose load it is.
func (c *Cache) goLoad(ctx context.Context, fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start(task{fn, ctx})
}

// goOwnedLocked is goOwned for a caller holding c.mu.
func (c *Cache) goOwnedLocked(fn func()) bool { return c.start(task{fn: fn}) }

// start runs t on an idle goroutine an earlier task left, when there is
// one, else on a new one; the caller holds c.mu. A load's goroutine grows
// its stack two or three times over (a fresh one starts at 2 KiB), and
// copying it took a fifth of a miss's CPU (BenchmarkMissLoad).
func (c *Cache) start(t task) bool {
	if c.closed.Load() {
		return false
	}
	select {
	case c.idle <- t:
		return true
	default:
	}
	c.loads.Add(1)
	go c.work(t)
	return true
}

// task is work for an owned goroutine, and the context whose pprof labels
// it runs under; with none (a loop), a new goroutine keeps the labels of
// the one that started it, and an idle one runs it with no labels.
type task struct {
	fn  func()
	ctx context.Context
}

// Idle owned goroutines: at most maxIdleWorkers wait for work, each for
// workerIdle, so that a burst of loads leaves no crowd behind it.
const (
	maxIdleWorkers = 64
	workerIdle     = 2 * time.Second
)

// work runs t, then the tasks given it while it waits idle, until it has
// waited workerIdle for none or the Cache closes.
func (c *Cache) work(t task) {
	defer c.loads.Done()
	var idle *time.Timer
	for {
		switch {
		case t.ctx != nil:
			pprof.SetGoroutineLabels(t.ctx)
		case idle != nil:
			// Not the labels of the task before.
			pprof.SetGoroutineLabels(context.Background())
		}
		t.fn()
		if c.idlers.Add(1) > maxIdleWorkers {
			c.idlers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case t = <-c.idle:
			c.idlers.Add(-1)
		case <-idle.C:
			c.idlers.Add(-1)
			return
		case <-c.ctx.Done():
			c.idlers.Add(-1)
			idle.Stop()
			return
		}
	}
}

func (c *Cache) logger() *slog.Logger { return c.opts.Logger }

// isNotFound reports whether a loader error means "no such value".
func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
