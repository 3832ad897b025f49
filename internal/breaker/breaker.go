// Package breaker is a small circuit breaker for one dependency (a whole
// Redis tier).
//
// It is closed while calls mostly succeed. It opens on N consecutive failures
// or when the failure rate over a short rolling window reaches a threshold
// with enough calls in it. While open, Allow refuses calls, so the caller can
// skip the dependency instead of waiting for it to fail. After the open
// interval the first Allow moves it to half-open, which lets a few probe
// calls through: enough successes close it, one failure opens it again with
// a longer interval (exponential backoff up to a cap).
//
// Every state change starts a new generation. Allow hands out the generation
// a call runs in, and Done ignores a result from an older generation: a call
// that started before the breaker opened and failed late must not count
// against the half-open probes, nor a late success close a breaker that has
// since reopened (the gobreaker design).
//
// The logic lives in core, which is not safe for concurrent use and takes the
// time as an argument, so it is tested with plain values; Breaker adds a
// mutex and the injected clock.
package breaker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is the breaker's state.
type State int32

// The states of a breaker.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Outcome is what a call that Allow let through reports to Done.
type Outcome int

// The outcomes of a call.
const (
	// Success: the dependency answered (a miss is a success).
	Success Outcome = iota
	// Failure: the dependency failed or did not answer in time.
	Failure
	// Ignore: the call says nothing about the dependency's health, e.g. the
	// caller cancelled it. A half-open probe reporting Ignore frees its
	// probe slot without deciding anything.
	Ignore
	// Silent: a Failure during which the dependency answered no call at
	// all, for as long as this call waited (a frozen server, a cut
	// network). While closed it opens the breaker at once, rather than
	// after ConsecutiveFailures: each of those would be another caller
	// waiting its whole timeout on a dependency already known to answer
	// nothing (SilentFailures sets how many in a row). Elsewhere it is a
	// Failure.
	Silent
	// Late: a call that ran out of time while the dependency was seen
	// answering around it (another call's answer, or a PING sent after
	// the timeout): a late scheduler on either side, or a queue of this
	// process's own commands, not a dependency that is gone. While closed
	// it counts in the FailureRate window, so a dependency too slow for
	// most calls still opens the breaker, but neither toward
	// ConsecutiveFailures nor SilentFailures, nor does it reset them.
	// Elsewhere it is a Failure.
	Late
)

// Settings configures a breaker. The zero value means the defaults.
type Settings struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row while closed. Default 5.
	ConsecutiveFailures int
	// SilentFailures opens the breaker after this many Silent failures in
	// a row while closed (they count as failures too). Default 1.
	SilentFailures int
	// FailureRate opens the breaker when at least this share of the calls
	// in Window failed, once Window holds at least MinRequests calls. Default
	// 0.5.
	FailureRate float64
	// MinRequests is the number of calls Window must hold before FailureRate
	// applies, so that 1 failure out of 1 call does not open it. Default 20.
	MinRequests int
	// Window is the length of the rolling window for FailureRate. It is
	// kept as 10 buckets of Window/10. Default 10 s.
	Window time.Duration
	// OpenTimeout is how long the breaker stays open before it lets probes
	// through. Each reopening from half-open doubles it, up to
	// MaxOpenTimeout; closing resets it. Default 1 s.
	OpenTimeout time.Duration
	// MaxOpenTimeout caps the backoff of OpenTimeout. Default 30 s.
	MaxOpenTimeout time.Duration
	// Probes is the number of calls let through while half-open, and the
	// number of successes that close the breaker. Default 3.
	Probes int
}

// Defaults of Settings.
const (
	DefaultConsecutiveFailures = 5
	DefaultSilentFailures      = 1
	DefaultFailureRate         = 0.5
	DefaultMinRequests         = 20
	DefaultWindow              = 10 * time.Second
	DefaultOpenTimeout         = time.Second
	DefaultMaxOpenTimeout      = 30 * time.Second
	DefaultProbes              = 3
)

const buckets = 10

// withDefaults validates s and fills in the defaults.
func (s Settings) withDefaults() (Settings, error) {
	if s.ConsecutiveFailures < 0 || s.SilentFailures < 0 || s.MinRequests < 0 || s.Probes < 0 ||
		s.Window < 0 || s.OpenTimeout < 0 || s.MaxOpenTimeout < 0 {
		return s, errors.New("breaker: negative setting")
	}
	if s.FailureRate < 0 || s.FailureRate > 1 {
		return s, fmt.Errorf("breaker: FailureRate %v not in [0, 1]", s.FailureRate)
	}
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if s.SilentFailures == 0 {
		s.SilentFailures = DefaultSilentFailures
	}
	if s.FailureRate == 0 {
		s.FailureRate = DefaultFailureRate
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Window == 0 {
		s.Window = DefaultWindow
	}
	if s.Window < buckets {
		return s, fmt.Errorf("breaker: Window %v too short", s.Window)
	}
	if s.OpenTimeout == 0 {
		s.OpenTimeout = DefaultOpenTimeout
	}
	if s.MaxOpenTimeout == 0 {
		s.MaxOpenTimeout = max(DefaultMaxOpenTimeout, s.OpenTimeout)
	}
	if s.MaxOpenTimeout < s.OpenTimeout {
		return s, fmt.Errorf("breaker: MaxOpenTimeout %v < OpenTimeout %v", s.MaxOpenTimeout, s.OpenTimeout)
	}
	if s.Probes == 0 {
		s.Probes = DefaultProbes
	}
	return s, nil
}

// bucket counts the calls that ended in one slice of the window.
type bucket struct {
	start    int64 // unix nanoseconds of the slice's start; 0 = unused
	calls    int
	failures int
}

// core is the breaker's state machine. It is not safe for concurrent use and
// never reads the clock: every method takes now.
type core struct {
	s Settings

	state       State
	generation  uint64
	consecutive int // failures in a row while closed
	silent      int // Silent failures in a row while closed
	window      [buckets]bucket
	openUntil   time.Time
	openFor     time.Duration // the current open interval, with backoff
	probesOut   int           // probes let through and not yet reported
	probesOK    int           // successful probes in this half-open period
	transitions uint64
	opens       uint64
}

func newCore(s Settings) *core {
	return &core{s: s, openFor: s.OpenTimeout}
}

// allow reports whether a call may go ahead, and the generation it runs in.
func (c *core) allow(now time.Time) (uint64, bool) {
	switch c.state {
	case Closed:
		return c.generation, true
	case Open:
		if now.Before(c.openUntil) {
			return c.generation, false
		}
		c.setState(HalfOpen, now)
		fallthrough
	case HalfOpen:
		if c.probesOut+c.probesOK >= c.s.Probes {
			return c.generation, false
		}
		c.probesOut++
		return c.generation, true
	}
	return c.generation, false
}

// done records the outcome of a call allowed in generation gen. Results from
// an earlier generation are ignored.
func (c *core) done(gen uint64, o Outcome, now time.Time) {
	if gen != c.generation {
		return
	}
	switch c.state {
	case Closed:
		switch o {
		case Success:
			c.consecutive, c.silent = 0, 0
			c.record(now, false)
		case Failure, Silent:
			c.consecutive++
			if o == Silent {
				c.silent++
			} else {
				c.silent = 0 // the dependency answered, with an error
			}
			calls, failures := c.record(now, true)
			if c.rateReached(calls, failures) || c.silent >= c.s.SilentFailures || c.consecutive >= c.s.ConsecutiveFailures {
				c.openFor = c.s.OpenTimeout
				c.setState(Open, now)
			}
		case Late:
			if c.rateReached(c.record(now, true)) {
				c.openFor = c.s.OpenTimeout
				c.setState(Open, now)
			}
		}
	case HalfOpen:
		if c.probesOut > 0 {
			c.probesOut--
		}
		switch o {
		case Success:
			c.probesOK++
			if c.probesOK >= c.s.Probes {
				c.openFor = c.s.OpenTimeout
				c.setState(Closed, now)
			}
		case Failure, Silent, Late:
			c.openFor = min(2*c.openFor, c.s.MaxOpenTimeout)
			c.setState(Open, now)
		}
	}
}

// rateReached reports whether a window of calls with failures among them
// opens the breaker by FailureRate.
func (c *core) rateReached(calls, failures int) bool {
	return calls >= c.s.MinRequests && float64(failures) >= c.s.FailureRate*float64(calls)
}

// recovered cuts an open interval short: evidence from outside the calls
// says the server answers again. The backoff starts over; the probes
// still decide whether the breaker closes.
func (c *core) recovered(now time.Time) {
	if c.state == Open {
		c.openFor = c.s.OpenTimeout
		c.openUntil = now
	}
}

// record adds one call to the rolling window and returns the window's
// totals.
func (c *core) record(now time.Time, failed bool) (calls, failures int) {
	start := c.sliceStart(now)
	b := c.bucketOf(start)
	if b.start != start {
		*b = bucket{start: start}
	}
	b.calls++
	if failed {
		b.failures++
	}
	oldest := start - int64(c.s.Window) + c.sliceWidth()
	for i := range c.window {
		if w := &c.window[i]; w.start >= oldest {
			calls += w.calls
			failures += w.failures
		}
	}
	return calls, failures
}

// addSuccesses adds n successes that ended in the window's slice starting
// at start (see Breaker.DoneAt), unless that slice has left the window.
// The slice's bucket exists: the success that started counting for it was
// recorded under the lock.
func (c *core) addSuccesses(start int64, n int) {
	if b := c.bucketOf(start); b.start == start {
		b.calls += n
	}
}

// sliceWidth is the length of one of the window's slices, in nanoseconds.
// It and the two below read only the settings, which never change.
func (c *core) sliceWidth() int64 { return int64(c.s.Window / buckets) }

// sliceStart is the start of the window's slice that now falls in, in
// Unix nanoseconds.
func (c *core) sliceStart(now time.Time) int64 {
	return now.UnixNano() - now.UnixNano()%c.sliceWidth()
}

// bucketOf is the bucket of the slice starting at start.
func (c *core) bucketOf(start int64) *bucket {
	return &c.window[(start/c.sliceWidth())%buckets]
}

func (c *core) setState(s State, now time.Time) {
	c.state = s
	c.generation++
	c.transitions++
	c.consecutive, c.silent = 0, 0
	c.probesOut, c.probesOK = 0, 0
	c.window = [buckets]bucket{}
	if s == Open {
		c.opens++
		c.openUntil = now.Add(c.openFor)
	}
}

// Breaker is a core guarded by a mutex, with a clock.
type Breaker struct {
	now func() time.Time

	// snap mirrors core's generation<<2 | state, so that State and the
	// closed fast path of Allow (every call while Redis is healthy) need no
	// lock.
	snap atomic.Uint64

	// While closed with no failure in a row, a success only adds a call
	// to the window's current slice: clean says so, and such successes
	// are counted in okCalls for the slice starting at okStart, without
	// the lock, and added to the window (fold) before anything under the
	// lock reads it. With the clock read once for the tier and the
	// breaker, this was worth about 2% of a healthy tier's shared-hit
	// throughput (BenchmarkGetSharedHitRatio, 64 readers on 2 cores).
	clean   atomic.Bool
	okStart atomic.Int64
	okCalls atomic.Int64

	mu   sync.Mutex
	core *core
}

// New returns a closed breaker. now is the clock; nil means time.Now.
func New(s Settings, now func() time.Time) (*Breaker, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{now: now, core: newCore(s)}, nil
}

// Allow reports whether a call may go ahead. When it may, the caller must
// report the outcome with Done(gen, ...), exactly once.
func (b *Breaker) Allow() (gen uint64, ok bool) {
	if snap := b.snap.Load(); State(snap&3) == Closed {
		// A state change right after this load is harmless: the call's
		// result then carries an old generation and Done ignores it.
		return snap >> 2, true
	}
	now := b.now() // outside the lock: the clock may be slow, the lock is shared
	b.mu.Lock()
	gen, ok = b.core.allow(now)
	b.publish()
	b.mu.Unlock()
	return gen, ok
}

// AllowCall is Allow that also reports whether the call is a half-open
// probe, one of the few whose outcomes decide whether the breaker closes,
// so that the caller can make the probe without holding a reader on a
// dependency that may still be down.
func (b *Breaker) AllowCall() (gen uint64, probe, ok bool) {
	if snap := b.snap.Load(); State(snap&3) == Closed {
		return snap >> 2, false, true // see Allow
	}
	now := b.now()
	b.mu.Lock()
	gen, ok = b.core.allow(now)
	probe = ok && b.core.state == HalfOpen
	b.publish()
	b.mu.Unlock()
	return gen, probe, ok
}

// publish copies core's generation and state to snap, and whether a
// success may be counted without the lock to clean; b.mu is held.
func (b *Breaker) publish() {
	b.snap.Store(b.core.generation<<2 | uint64(b.core.state))
	b.clean.Store(b.core.state == Closed && b.core.consecutive == 0 && b.core.silent == 0)
}

// fold adds the successes counted without the lock to the window, and
// starts counting them for the slice starting at start (0: none, so the
// next success takes the lock); b.mu is held. A success counted while a
// state change was under way may land in the new generation's window: a
// call or two in a window of thousands.
func (b *Breaker) fold(start int64) {
	if n := b.okCalls.Swap(0); n > 0 {
		if at := b.okStart.Load(); at != 0 {
			b.core.addSuccesses(at, int(n))
		}
	}
	b.okStart.Store(start)
}

// Done reports the outcome of a call allowed in generation gen.
func (b *Breaker) Done(gen uint64, o Outcome) { b.DoneAt(gen, o, b.now()) }

// DoneAt is Done for a call that ended at now, read from the breaker's
// clock.
func (b *Breaker) DoneAt(gen uint64, o Outcome, now time.Time) {
	start := b.core.sliceStart(now)
	if o == Success && b.clean.Load() && b.snap.Load() == gen<<2|uint64(Closed) && b.okStart.Load() == start {
		b.okCalls.Add(1)
		return
	}
	b.mu.Lock()
	b.fold(0)
	b.core.done(gen, o, now)
	b.publish()
	if b.clean.Load() {
		b.okStart.Store(start)
	}
	b.mu.Unlock()
}

// Recovered tells the breaker that the server answers again, seen outside
// the calls it guards (the Redis tier's invalidation stream heard its own
// heartbeat after a loss): an open breaker lets its probes through at once
// instead of at the end of an interval an outage may have doubled several
// times, and its backoff starts over.
func (b *Breaker) Recovered() {
	now := b.now()
	b.mu.Lock()
	b.core.recovered(now)
	b.publish()
	b.mu.Unlock()
}

// State returns the current state. An open breaker whose interval has passed
// still reports Open until the next Allow moves it to half-open.
func (b *Breaker) State() State { return State(b.snap.Load() & 3) }

// Counts is a snapshot of the breaker's history.
type Counts struct {
	State       State
	Transitions uint64 // state changes since New
	Opens       uint64 // times it opened
}

// Counts returns a snapshot.
func (b *Breaker) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Counts{State: b.core.state, Transitions: b.core.transitions, Opens: b.core.opens}
}

// Reset closes the breaker and forgets its history, as if it were new: the
// dependency it guards is now another server (a primary that moved), of
// which the old one's failures say nothing. Calls allowed before report to
// an old generation and are ignored.
func (b *Breaker) Reset() {
	now := b.now()
	b.mu.Lock()
	b.fold(0)
	b.core.openFor = b.core.s.OpenTimeout
	if b.core.state != Closed {
		b.core.setState(Closed, now)
	} else {
		// A new generation and an empty window, without counting a
		// transition that did not happen.
		b.core.generation++
		b.core.consecutive, b.core.silent = 0, 0
		b.core.window = [buckets]bucket{}
	}
	b.publish()
	b.mu.Unlock()
}
