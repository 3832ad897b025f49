package tiertest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runStream(t *testing.T) {
	t.Run("Delivery", s.streamDelivery)
	t.Run("OwnAnnouncements", s.streamOwn)
	t.Run("StopsWithContext", s.streamStops)
}

// recorder is a tier.Listener that keeps what it was told and checks that
// it is told one thing at a time.
type recorder struct {
	inside atomic.Int32 // calls running now
	mu     sync.Mutex
	events []event
	heard  chan struct{} // a token for each Heard
	// overlap is set when a call began while another ran.
	overlap atomic.Bool
}

type event struct {
	key, origin string
	at          time.Time
	lost        bool
}

func newRecorder() *recorder { return &recorder{heard: make(chan struct{}, 1024)} }

func (r *recorder) enter() {
	if r.inside.Add(1) > 1 {
		r.overlap.Store(true)
	}
}

func (r *recorder) Invalidated(key string, at time.Time, origin string) {
	r.enter()
	defer r.inside.Add(-1)
	r.mu.Lock()
	r.events = append(r.events, event{key: key, at: at, origin: origin})
	r.mu.Unlock()
}

func (r *recorder) Heard() {
	r.enter()
	defer r.inside.Add(-1)
	select {
	case r.heard <- struct{}{}:
	default:
	}
}

func (r *recorder) Lost() {
	r.enter()
	defer r.inside.Add(-1)
	r.mu.Lock()
	r.events = append(r.events, event{lost: true})
	r.mu.Unlock()
}

// since returns the events from index i on.
func (r *recorder) since(i int) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events[min(i, len(r.events)):]...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// listen runs st.Listen into a new recorder until the test ends (or stop
// is called), waits for its first Heard, and checks that Listen returns
// once its context ends.
func listen(t *testing.T, st tier.InvalidationStream) (r *recorder, stop func()) {
	t.Helper()
	r = newRecorder()
	lctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Listen(lctx, r)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(Patience):
				t.Errorf("Listen did not return %v after its context ended", Patience)
			}
			if r.overlap.Load() {
				t.Errorf("the stream called the Listener while another of its calls ran")
			}
		})
	}
	t.Cleanup(stop)
	waitHeard(t, r)
	return r, stop
}

// waitHeard waits for the next Heard.
func waitHeard(t *testing.T, r *recorder) {
	t.Helper()
	select {
	case <-r.heard:
	case <-time.After(Patience):
		t.Fatalf("the stream did not call Heard within %v of listening", Patience)
	}
}

// announce invalidates a fresh key with origin and waits until r has
// heard of it. A stream may lose announcements if it says so (Lost); the
// check then tries again with another key, a few times. It returns the
// event and the times the Invalidate call began and ended.
func announce(t *testing.T, from tier.Coordinator, r *recorder, origin string) (ev event, begin, end time.Time) {
	t.Helper()
	for attempt := range 3 {
		key := fmt.Sprintf("ns:announced-%d", attempt)
		c := ctx(t)
		if origin != "" {
			c = tier.WithOrigin(c, origin)
		}
		mark := r.count()
		begin = time.Now()
		if err := from.Invalidate(c, key); err != nil {
			t.Fatalf("Invalidate: %v", err)
		}
		end = time.Now()
		lost := false
		if eventually(func() bool {
			for _, e := range r.since(mark) {
				if e.lost {
					lost = true
					return true
				}
				if e.key == key {
					ev = e
					return true
				}
			}
			return false
		}) && !lost {
			return ev, begin, end
		}
		if !lost {
			t.Fatalf("an invalidation of %q was neither delivered nor reported lost within %v", key, Patience)
		}
		t.Logf("the stream reported a loss while %q was announced; trying again", key)
		waitHeard(t, r)
	}
	t.Fatal("the stream lost three announcements in a row")
	return event{}, time.Time{}, time.Time{}
}

// clockSlack allows for the clocks of two clients of one machine.
const clockSlack = 50 * time.Millisecond

func checkEvent(t *testing.T, ev event, origin string, begin, end time.Time) {
	t.Helper()
	if ev.origin != origin {
		t.Errorf("Invalidated origin = %q; want %q", ev.origin, origin)
	}
	if ev.at.Before(begin.Add(-clockSlack)) || ev.at.After(end.Add(clockSlack)) {
		t.Errorf("Invalidated at %v; the Invalidate call ran from %v to %v", ev.at, begin, end)
	}
}

// Another process's invalidation reaches a listener: the key as given to
// Invalidate, when, and on whose behalf.
func (s *suite) streamDelivery(t *testing.T) {
	sa, sb := clients[tier.InvalidationStream](t, s, true)
	r, _ := listen(t, sb)
	ev, begin, end := announce(t, sa, r, "origin-a")
	checkEvent(t, ev, "origin-a", begin, end)
	ev, begin, end = announce(t, sa, r, "")
	checkEvent(t, ev, "", begin, end)
}

// A process hears its own invalidations too.
func (s *suite) streamOwn(t *testing.T) {
	st := s.open(t).(tier.InvalidationStream)
	r, _ := listen(t, st)
	ev, begin, end := announce(t, st, r, "me")
	checkEvent(t, ev, "me", begin, end)
}

// Listen returns when its context ends, also one that ended before it
// began.
func (s *suite) streamStops(t *testing.T) {
	st := s.open(t).(tier.InvalidationStream)
	_, stop := listen(t, st)
	stop()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.Listen(cancelled, newRecorder())
	}()
	select {
	case <-done:
	case <-time.After(Patience):
		t.Fatalf("Listen with a cancelled context did not return within %v", Patience)
	}
}
