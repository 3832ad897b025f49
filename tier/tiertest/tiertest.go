// Package tiertest checks that a tier.Tier keeps the contracts package tier
// documents, as testing/slogtest does for a slog.Handler and testing/fstest
// for an fs.FS: an implementation's own test calls Run with a constructor,
// and every contract is a subtest of its own, named for the method or
// behaviour it checks.
//
// Run checks the methods of tier.Tier and of every optional capability the
// tier has (tier.Coordinator, tier.Refiller, tier.Smearer, tier.HotSharer,
// tier.InvalidationStream), through the interfaces only. A
// capability the tier lacks is logged; one that Config.Want names and the
// tier lacks fails the run. The checks that need a second process (a write
// another client reads, an invalidation another client hears, a lease
// another client is refused) open a second client of the same tier.
//
// Whatever is eventual (expiry, what another client sees, stream delivery)
// is polled with a generous bound (Patience) rather than slept for, so that
// the suite holds on a loaded machine; what a contract says happens at once
// is checked at once.
package tiertest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// Config is the tier under test.
type Config struct {
	// New makes a fresh, empty tier and returns the function that opens a
	// client of it. Each call of New is a tier of its own: no key,
	// version, lease, hot set or invalidation of another is visible
	// through it. Each call of the returned function opens another client
	// of that one tier, as another process would (an in-memory tier
	// shared by several Caches may return itself each time). Run closes
	// every client it opens, and reports an error from Close.
	New func(t *testing.T) (open func(t *testing.T) tier.Tier)

	// Want lists the capabilities the tier must have; the run fails when
	// the tier lacks one. A capability the tier has is checked whether or
	// not it is wanted.
	Want Capabilities

	// MaxValueBytes is the largest value the tier must store, as the
	// Cache writes it (envelope included). Default DefaultMaxValueBytes.
	MaxValueBytes int

	// CoordinatorRefuses, when set, declares a known deviation: the keys
	// for which the tier's Coordinator calls fail, although the contract
	// takes any key the Cache qualifies. For those keys the suite checks
	// that every call fails with an error (never a wrong answer) and logs
	// the deviation with CoordinatorRefusesWhy; a call that succeeds fails
	// the run, so that a fix of the tier also removes the declaration.
	CoordinatorRefuses    func(key string) bool
	CoordinatorRefusesWhy string
}

// Capabilities names the optional interfaces of package tier.
type Capabilities struct {
	Coordinator        bool
	Refiller           bool
	Smearer            bool
	HotSharer          bool
	InvalidationStream bool
}

// DefaultMaxValueBytes is the largest value a Cache of the default policy
// writes: holdfast's default Policy.MaxValueBytes (1 MiB) of payload and the
// envelope's header. (The package does not import holdfast, whose internal
// tests run this suite.)
const DefaultMaxValueBytes = 1<<20 + tier.HeaderSize

// Patience bounds every eventual check: how long an expiry, a write seen
// by another client or a stream's delivery may take before the suite calls
// it missing. It is far above what any of them takes on an idle machine.
const Patience = 10 * time.Second

// pollEvery is the pace of eventual checks.
const pollEvery = 10 * time.Millisecond

// callTimeout bounds each context the suite gives a call, so that a tier
// that ignores its context fails the run instead of hanging it.
const callTimeout = 30 * time.Second

// Run checks the tier c.New makes against the contracts of package tier.
func Run(t *testing.T, c Config) {
	t.Helper()
	if c.New == nil {
		t.Fatal("tiertest: Config.New is nil")
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	s := &suite{cfg: c}
	probe := s.open(t)
	_, hasCoord := probe.(tier.Coordinator)
	_, hasRefill := probe.(tier.Refiller)
	_, hasSmear := probe.(tier.Smearer)
	_, hasShare := probe.(tier.HotSharer)
	_, hasStream := probe.(tier.InvalidationStream)

	t.Run("Tier", s.runTier)
	capability(t, "Coordinator", c.Want.Coordinator, hasCoord, s.runCoordinator)
	capability(t, "Refiller", c.Want.Refiller, hasRefill, s.runRefiller)
	capability(t, "Smearer", c.Want.Smearer, hasSmear, s.runSmearer)
	capability(t, "HotSharer", c.Want.HotSharer, hasShare, s.runHotSharer)
	capability(t, "InvalidationStream", c.Want.InvalidationStream, hasStream, s.runStream)
}

// capability runs a capability's checks when the tier has it, and says so
// when it does not: a failure when it was wanted, a log line otherwise.
func capability(t *testing.T, name string, want, has bool, run func(*testing.T)) {
	t.Helper()
	switch {
	case has:
		t.Run(name, run)
	case want:
		t.Errorf("the tier does not implement tier.%s, which Config.Want names", name)
	default:
		t.Logf("the tier does not implement tier.%s: not checked", name)
	}
}

type suite struct {
	cfg Config
}

// open makes a fresh tier and opens one client of it.
func (s *suite) open(t *testing.T) tier.Tier {
	t.Helper()
	tr, _ := s.pair(t, false)
	return tr
}

// pair makes a fresh tier and opens a client of it and, with peer, a
// second client of the same tier.
func (s *suite) pair(t *testing.T, peer bool) (tr, other tier.Tier) {
	t.Helper()
	open := s.cfg.New(t)
	if open == nil {
		t.Fatal("tiertest: Config.New returned a nil open function")
	}
	tr = openClient(t, open)
	if peer {
		other = openClient(t, open)
	}
	return tr, other
}

// clients makes a fresh tier and opens a client of it and, with peer, a
// second client, as I: the first is known to implement it, and the second
// must as well.
func clients[I any](t *testing.T, s *suite, peer bool) (a, b I) {
	t.Helper()
	x, y := s.pair(t, peer)
	a = x.(I)
	if peer {
		var ok bool
		if b, ok = y.(I); !ok {
			t.Fatalf("the second client, a %T, is not a %v", y, reflect.TypeFor[I]())
		}
	}
	return a, b
}

func openClient(t *testing.T, open func(*testing.T) tier.Tier) tier.Tier {
	t.Helper()
	tr := open(t)
	if tr == nil {
		t.Fatal("tiertest: the open function returned a nil tier")
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// ctx is a context for the suite's calls, bounded by callTimeout.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), callTimeout)
	t.Cleanup(cancel)
	return c
}

// eventually polls cond until it holds or Patience has passed, and reports
// whether it held.
func eventually(cond func() bool) bool {
	deadline := time.Now().Add(Patience)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
}

// dead returns a context already cancelled and one already past its
// deadline, each with its name.
func dead(t *testing.T) map[string]context.Context {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	t.Cleanup(cancel2)
	return map[string]context.Context{"cancelled": cancelled, "past its deadline": expired}
}
