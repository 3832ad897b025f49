package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of the Source. ErrRejected is also how a Reader reports a request
// refused by a load limit, so that the lab counts it as rejected.
var (
	// ErrRejected means a load limit refused the call at once.
	ErrRejected = errors.New("lab: rejected by load limit")
	// ErrSourceDown is what the source answers while it is made to fail.
	ErrSourceDown = errors.New("lab: source down")
)

// SourceConfig describes the stand-in for the database.
type SourceConfig struct {
	// Latency of one load. Zero means none.
	Latency time.Duration
	// Cap bounds concurrent loads, like a product service's per-pod semaphore
	// in front of MySQL. Zero means no cap.
	Cap int
	// QueueWait is how long a load may wait for a free slot before it is
	// rejected; zero means it is rejected at once (that semaphore had no
	// queue: a rejected request got a 503 immediately).
	QueueWait time.Duration
	// ValueSize is the size of the values returned. Zero means 512 bytes.
	ValueSize int
	// LatencyFor, when set and returning ok, gives a key its own latency
	// (hit-during-load's 1 s loads beside 12 ms ones).
	LatencyFor func(key string) (d time.Duration, ok bool)
	// VersionOf, when set, is where a load reads the key's current version
	// instead of the Source's own map: update-propagation's readers run in
	// child processes and ask the lab's process, which holds the versions
	// its writer bumps. Its error fails the load.
	VersionOf func(ctx context.Context, key string) (int64, error)
}

// Source stands for the database: every call takes Latency, at most Cap run
// at once, and each call is counted per second of the run and in the fault
// window. The latency and a failure can be changed while it runs (db-slow,
// db-down), and a hook can run after each load (redis-fail-during-put).
type Source struct {
	cfg   SourceConfig
	slots chan struct{} // nil when uncapped

	latency atomic.Int64 // time.Duration
	down    atomic.Bool

	mu         sync.Mutex
	start      time.Time
	win0       time.Duration
	win1       time.Duration
	perSecond  []int64
	total      int64
	inWindow   int64
	afterLoad  func(key string)
	beforeRead func(key string)
	versions   map[string]version
}

// version is a key's current version in the source and when it was written.
type version struct {
	n  int64
	at time.Time
}

// NewSource returns a Source; Begin must be called before the first load so
// that calls are placed in time.
func NewSource(cfg SourceConfig) *Source {
	if cfg.ValueSize <= 0 {
		cfg.ValueSize = 512
	}
	s := &Source{cfg: cfg, start: time.Now()}
	if cfg.Cap > 0 {
		s.slots = make(chan struct{}, cfg.Cap)
	}
	s.latency.Store(int64(cfg.Latency))
	return s
}

// Begin sets the run's start and its fault window [winStart, winEnd).
func (s *Source) Begin(start time.Time, winStart, winEnd time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start, s.win0, s.win1 = start, winStart, winEnd
}

// ResetCounts forgets the loads counted so far: a scenario's warm-up
// before the run is not part of its figures.
func (s *Source) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perSecond, s.total, s.inWindow = nil, 0, 0
}

// SetLatency changes the latency of loads that start from now on.
func (s *Source) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// SetDown makes loads fail with ErrSourceDown (after their latency, like a
// database that times out) until it is called with false.
func (s *Source) SetDown(down bool) { s.down.Store(down) }

// AfterLoad sets a hook that runs after a successful load, before the value
// is returned to the caller: the place to break Redis "during the put".
func (s *Source) AfterLoad(f func(key string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterLoad = f
}

// BeforeRead sets a hook that runs once a load has read the key's version
// (the database read), before the load's latency: the place to write the
// key while the old value is on its way back (stale-set-race).
func (s *Source) BeforeRead(f func(key string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeRead = f
}

// Update writes a new version of key, as a writer committing to the
// database would, and returns it.
func (s *Source) Update(key string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions == nil {
		s.versions = map[string]version{}
	}
	v := version{n: s.versions[key].n + 1, at: time.Now()}
	s.versions[key] = v
	return v.n
}

// Version returns key's current version and when it was written (zero time
// for version 0, the initial one).
func (s *Source) Version(key string) (int64, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.versions[key]
	return v.n, v.at
}

// Load is the loader: it returns a value for key, ErrRejected when the cap
// is reached, ErrSourceDown while down, or ctx's error.
func (s *Source) Load(ctx context.Context, key string) ([]byte, error) {
	if s.slots != nil {
		if err := s.acquire(ctx); err != nil {
			return nil, err
		}
		defer func() { <-s.slots }()
	}
	// Counted once admitted: a rejected call never reached the database.
	s.count()
	// The value is read first and travels back during the latency, so a
	// write during that time makes it old on arrival.
	s.mu.Lock()
	ver := s.versions[key].n
	before := s.beforeRead
	s.mu.Unlock()
	if s.cfg.VersionOf != nil {
		v, err := s.cfg.VersionOf(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("load %q: version: %w", key, err)
		}
		ver = v
	}
	if before != nil {
		before(key)
	}
	d := time.Duration(s.latency.Load())
	if s.cfg.LatencyFor != nil {
		if kd, ok := s.cfg.LatencyFor(key); ok {
			d = kd
		}
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	if s.down.Load() {
		return nil, fmt.Errorf("load %q: %w", key, ErrSourceDown)
	}
	s.mu.Lock()
	hook := s.afterLoad
	s.mu.Unlock()
	if hook != nil {
		hook(key)
	}
	return s.value(key, ver), nil
}

func (s *Source) acquire(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	default:
	}
	if s.cfg.QueueWait <= 0 {
		return ErrRejected
	}
	t := time.NewTimer(s.cfg.QueueWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-t.C:
		return ErrRejected
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Source) count() {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := time.Since(s.start)
	sec := int(max(at, 0) / time.Second)
	for len(s.perSecond) <= sec {
		s.perSecond = append(s.perSecond, 0)
	}
	s.perSecond[sec]++
	s.total++
	if at >= s.win0 && at < s.win1 {
		s.inWindow++
	}
}

// value is "key@version|" padded to the value size: deterministic per key
// and version, so that every mode caches the same bytes and a reader can
// tell which version it got (ValueVersion).
func (s *Source) value(key string, ver int64) []byte {
	v := make([]byte, s.cfg.ValueSize)
	n := copy(v, fmt.Sprintf("%s@%d|", key, ver))
	for i := n; i < len(v); i++ {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// ValueVersion returns the version a value of the Source was read at, or
// -1 if the bytes are not such a value.
func ValueVersion(v []byte) int64 {
	end := bytes.IndexByte(v, '|')
	if end < 0 {
		return -1
	}
	at := bytes.LastIndexByte(v[:end], '@')
	if at < 0 {
		return -1
	}
	n, err := strconv.ParseInt(string(v[at+1:end]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Calls returns the loads admitted in total and in the fault window.
func (s *Source) Calls() (total, inWindow int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.inWindow
}

// CallsPerSecond returns the loads admitted in each second of the run.
func (s *Source) CallsPerSecond() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.perSecond...)
}
