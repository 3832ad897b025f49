package inmem

import (
	"context"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// The Tier is a tier.InvalidationStream: each Invalidate is announced to
// every Listen of every Cache over it, in order, on the listener's own
// goroutine. Deafen and Hear stand for a stream that breaks and comes back.
var _ tier.InvalidationStream = (*Tier)(nil)

// listenerQueue is how many announcements a listener may be behind before
// the next is lost (and Lost called).
const listenerQueue = 4096

type subscriber struct {
	events chan streamEvent
}

type streamEvent struct {
	key    string
	origin string
	at     time.Time
	heard  bool // Heard, not an announcement
	lost   bool // Lost
}

// Listen implements tier.InvalidationStream.
func (t *Tier) Listen(ctx context.Context, l tier.Listener) {
	s := &subscriber{events: make(chan streamEvent, listenerQueue)}
	t.mu.Lock()
	if t.subscribers == nil {
		t.subscribers = make(map[*subscriber]struct{})
	}
	t.subscribers[s] = struct{}{}
	deaf := t.deaf
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.subscribers, s)
		t.mu.Unlock()
	}()
	if !deaf {
		l.Heard()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-s.events:
			switch {
			case e.heard:
				l.Heard()
			case e.lost:
				l.Lost()
			default:
				l.Invalidated(e.key, e.at, e.origin)
			}
		}
	}
}

// announce sends keys to every listener; t.mu is held. While the stream is
// deaf, announcements are lost.
func (t *Tier) announce(ctx context.Context, keys []string) {
	if t.deaf {
		return
	}
	at, origin := t.now(), tier.Origin(ctx)
	for s := range t.subscribers {
		for _, k := range keys {
			select {
			case s.events <- streamEvent{key: k, origin: origin, at: at}:
			default: // lost: the listener hears of it when it is heard again
			}
		}
	}
}

// Deafen makes the stream lose every announcement until Hear, and tells the
// listeners so (Lost).
func (t *Tier) Deafen() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deaf = true
	t.broadcast(streamEvent{lost: true})
}

// Hear ends Deafen: the listeners hear the stream again (Heard).
func (t *Tier) Hear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deaf = false
	t.broadcast(streamEvent{heard: true})
}

func (t *Tier) broadcast(e streamEvent) {
	for s := range t.subscribers {
		s.events <- e // control events are rare; a full queue waits
	}
}
