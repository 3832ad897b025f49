package breaker

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a hand-moved clock: breaker timing is tested without sleeps.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFake() *fakeClock                { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func mustNew(t *testing.T, s Settings, c *fakeClock) *Breaker {
	t.Helper()
	b, err := New(s, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// call runs one call through b with outcome o and reports whether it was
// allowed.
func call(b *Breaker, o Outcome) bool {
	gen, ok := b.Allow()
	if ok {
		b.Done(gen, o)
	}
	return ok
}

func wantState(t *testing.T, b *Breaker, want State) {
	t.Helper()
	if got := b.State(); got != want {
		t.Fatalf("state = %v, want %v", got, want)
	}
}

func TestConsecutiveFailuresOpen(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	for i := 0; i < DefaultConsecutiveFailures-1; i++ {
		call(b, Failure)
	}
	call(b, Success) // resets the run
	for i := 0; i < DefaultConsecutiveFailures-1; i++ {
		call(b, Failure)
	}
	wantState(t, b, Closed)
	call(b, Failure)
	wantState(t, b, Open)
	if call(b, Success) {
		t.Fatal("open breaker allowed a call")
	}
	if got := b.Counts(); got.Opens != 1 || got.Transitions != 1 {
		t.Fatalf("counts = %+v", got)
	}
}

// A Silent failure (the dependency answered nothing while the call waited)
// opens a closed breaker at once; from half-open it reopens with backoff
// like any failure.
func TestSilentFailureOpensAtOnce(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	call(b, Success)
	call(b, Failure)
	wantState(t, b, Closed)
	call(b, Silent)
	wantState(t, b, Open)
	c.add(DefaultOpenTimeout)
	call(b, Silent) // the half-open probe
	wantState(t, b, Open)
	c.add(DefaultOpenTimeout)
	if _, ok := b.Allow(); ok {
		t.Fatal("reopened breaker let a call through after one OpenTimeout; want the doubled interval")
	}
	if got := b.Counts(); got.Opens != 2 {
		t.Fatalf("counts = %+v, want 2 opens", got)
	}

	// SilentFailures raised: Silent failures open after that many in a
	// row, and a failure the dependency answered breaks the run.
	b = mustNew(t, Settings{SilentFailures: 2}, c)
	call(b, Silent)
	call(b, Failure)
	call(b, Silent)
	wantState(t, b, Closed)
	call(b, Silent)
	wantState(t, b, Open)
}

// A Late failure (the dependency was seen answering around it) counts
// toward the failure rate only: any number in a row leaves a closed
// breaker closed and the runs of other failures as they were, while a
// dependency late for most calls still opens it by rate; from half-open it
// reopens like any failure.
func TestLateFailureCountsInTheRateOnly(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	for range DefaultConsecutiveFailures - 1 {
		call(b, Failure)
	}
	for range DefaultMinRequests - DefaultConsecutiveFailures {
		call(b, Late) // neither opens nor resets the run of failures
		c.add(10 * time.Millisecond)
	}
	wantState(t, b, Closed)
	call(b, Failure) // the fifth in a row
	wantState(t, b, Open)

	b = mustNew(t, Settings{}, c)
	for i := range DefaultMinRequests - 1 {
		if i%2 == 0 {
			call(b, Late)
		} else {
			call(b, Success)
		}
		c.add(100 * time.Millisecond)
	}
	wantState(t, b, Closed)
	call(b, Late) // 11 late of 20 calls: past the rate
	wantState(t, b, Open)
	c.add(DefaultOpenTimeout)
	call(b, Late) // the half-open probe
	wantState(t, b, Open)
}

func TestFailureRateOpens(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	// Alternate: never two failures in a row, 50% rate. Below MinRequests the
	// rate does not apply.
	for i := 0; i < DefaultMinRequests-1; i++ {
		call(b, Outcome(i%2)) // Success, Failure, ...
		c.add(100 * time.Millisecond)
	}
	wantState(t, b, Closed)
	call(b, Failure) // 20th call, 10 failures of 20
	wantState(t, b, Open)
}

func TestFailureRateWindowSlides(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	// 15 failures spread so none are consecutive beyond 1, then the window
	// passes: old failures no longer count.
	for i := 0; i < 15; i++ {
		call(b, Failure)
		call(b, Success)
		call(b, Success)
	}
	wantState(t, b, Closed) // 15 of 45 = 33%
	c.add(DefaultWindow + time.Second)
	for i := 0; i < 10; i++ {
		call(b, Success)
	}
	for i := 0; i < 4; i++ {
		call(b, Failure)
		call(b, Success)
	}
	wantState(t, b, Closed) // 4 of 18 in the window
}

func openBreaker(t *testing.T, b *Breaker) {
	t.Helper()
	for i := 0; i < DefaultConsecutiveFailures; i++ {
		call(b, Failure)
	}
	wantState(t, b, Open)
}

func TestHalfOpenCloses(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	openBreaker(t, b)
	c.add(DefaultOpenTimeout - time.Millisecond)
	if call(b, Success) {
		t.Fatal("allowed before the open interval passed")
	}
	c.add(time.Millisecond)
	// Half-open lets exactly Probes calls through at once.
	var gens []uint64
	for i := 0; i < DefaultProbes; i++ {
		gen, ok := b.Allow()
		if !ok {
			t.Fatalf("probe %d refused", i)
		}
		gens = append(gens, gen)
	}
	wantState(t, b, HalfOpen)
	if _, ok := b.Allow(); ok {
		t.Fatal("more probes than Probes let through")
	}
	for _, g := range gens {
		b.Done(g, Success)
	}
	wantState(t, b, Closed)
	// Closed again: the failure count starts from zero.
	for i := 0; i < DefaultConsecutiveFailures-1; i++ {
		call(b, Failure)
	}
	wantState(t, b, Closed)
}

func TestHalfOpenReopensWithBackoff(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	openBreaker(t, b)
	c.add(DefaultOpenTimeout)
	call(b, Success)
	call(b, Failure) // a failed probe reopens at once
	wantState(t, b, Open)
	c.add(DefaultOpenTimeout)
	if call(b, Success) {
		t.Fatal("reopened breaker did not back off")
	}
	c.add(DefaultOpenTimeout) // 2x
	if !call(b, Success) {
		t.Fatal("probe refused after the doubled interval")
	}
	// Backoff is capped.
	for i := 0; i < 20; i++ {
		call(b, Failure)
		c.add(DefaultMaxOpenTimeout)
	}
	if !call(b, Success) {
		t.Fatal("backoff above MaxOpenTimeout")
	}
}

func TestIgnoredOutcomeNotCounted(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	for i := 0; i < 100; i++ {
		call(b, Ignore) // e.g. the caller cancelled
	}
	for i := 0; i < DefaultConsecutiveFailures-1; i++ {
		call(b, Failure)
		call(b, Ignore)
	}
	wantState(t, b, Closed)

	// A cancelled probe frees its slot without closing or reopening.
	openBreaker(t, b)
	c.add(DefaultOpenTimeout)
	gen, _ := b.Allow()
	b.Done(gen, Ignore)
	wantState(t, b, HalfOpen)
	for i := 0; i < DefaultProbes; i++ {
		if !call(b, Success) {
			t.Fatalf("probe %d refused after a cancelled probe", i)
		}
	}
	wantState(t, b, Closed)
}

func TestStaleGenerationIgnored(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	// Calls that started while closed...
	var late []uint64
	for i := 0; i < 10; i++ {
		g, _ := b.Allow()
		late = append(late, g)
	}
	openBreaker(t, b)
	c.add(DefaultOpenTimeout)
	g, ok := b.Allow() // half-open probe
	if !ok {
		t.Fatal("probe refused")
	}
	// ...report late: their failures must not reopen the half-open
	// breaker, and their successes must not close it.
	for _, lg := range late {
		b.Done(lg, Failure)
	}
	wantState(t, b, HalfOpen)
	b.Done(g, Success)
	for _, lg := range late {
		b.Done(lg, Success)
	}
	wantState(t, b, HalfOpen)
	if got := b.Counts().Opens; got != 1 {
		t.Fatalf("opens = %d, want 1", got)
	}
}

func TestSettingsValidate(t *testing.T) {
	for _, s := range []Settings{
		{ConsecutiveFailures: -1},
		{FailureRate: 1.5},
		{Window: time.Nanosecond},
		{OpenTimeout: time.Minute, MaxOpenTimeout: time.Second},
	} {
		if _, err := New(s, nil); err == nil {
			t.Errorf("New(%+v) = nil error", s)
		}
	}
}

// Recovered lets an open breaker's probes through at once, its backoff
// started over, and does nothing to a closed one.
func TestRecoveredCutsTheOpenIntervalShort(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{}, c)
	b.Recovered()
	wantState(t, b, Closed)
	openBreaker(t, b)
	for range 4 { // probes fail: 1, 2, 4, 8 s
		c.add(DefaultMaxOpenTimeout)
		call(b, Failure)
	}
	wantState(t, b, Open)
	if call(b, Success) {
		t.Fatal("a probe went through during the open interval")
	}
	b.Recovered()
	if !call(b, Failure) { // the server is not back after all
		t.Fatal("a probe refused after Recovered")
	}
	// The backoff started over: the failed probe reopens for 2 s, not 32.
	c.add(2 * DefaultOpenTimeout)
	for i := range DefaultProbes {
		if !call(b, Success) {
			t.Fatalf("probe %d refused 2 s after a failed probe that followed Recovered", i)
		}
	}
	wantState(t, b, Closed)
}

// TestResetForgetsTheOldServer: after Reset an open breaker is closed, a
// closed one has forgotten its failures, and calls allowed before report
// to a generation that no longer counts.
func TestResetForgetsTheOldServer(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{ConsecutiveFailures: 3, OpenTimeout: time.Second, MaxOpenTimeout: 8 * time.Second}, c)
	for range 3 {
		call(b, Failure)
	}
	wantState(t, b, Open)
	b.Reset()
	wantState(t, b, Closed)

	// Two failures, a Reset, then two more: not three in a row.
	for range 2 {
		call(b, Failure)
	}
	old, ok := b.Allow()
	if !ok {
		t.Fatal("closed breaker refused a call")
	}
	b.Reset()
	b.Done(old, Failure) // of the old server: ignored
	for range 2 {
		call(b, Failure)
	}
	wantState(t, b, Closed)
	call(b, Failure)
	wantState(t, b, Open)
	if n := b.Counts().Opens; n != 2 {
		t.Fatalf("opens = %d, want 2", n)
	}
}

// Successes while closed with no failure in a row are counted without the
// lock; they count in the failure rate all the same, in the window slice
// they ended in, and leave it with that slice.
func TestLockFreeSuccessesCountInTheRate(t *testing.T) {
	c := newFake()
	b := mustNew(t, Settings{ConsecutiveFailures: 1000}, c)
	// 30 successes over three slices of the window.
	for i := range 30 {
		call(b, Success)
		if i%10 == 9 {
			c.add(time.Second)
		}
	}
	// 29 failures: 29 of 59 calls, under half.
	for range 29 {
		call(b, Failure)
	}
	wantState(t, b, Closed)
	call(b, Failure) // 30 of 60
	wantState(t, b, Open)

	// The successes leave the window with their slices: 20 successes,
	// then the window slides past them; 20 failures then open it.
	b = mustNew(t, Settings{ConsecutiveFailures: 1000}, c)
	for range 20 {
		call(b, Success)
	}
	c.add(DefaultWindow + time.Second)
	for range 19 {
		call(b, Failure)
	}
	wantState(t, b, Closed) // 19 calls, under MinRequests
	call(b, Failure)
	wantState(t, b, Open) // 20 of 20: the old successes are gone
}

// Successes reported concurrently are all counted.
func TestConcurrentSuccessesAllCount(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	b, err := New(Settings{ConsecutiveFailures: 100_000}, func() time.Time { return at })
	if err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				call(b, Success)
			}
		}()
	}
	wg.Wait()
	for range goroutines*each - 1 {
		call(b, Failure)
	}
	wantState(t, b, Closed)
	call(b, Failure)
	wantState(t, b, Open)
}
