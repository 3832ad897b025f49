package tiertest

import (
	"bytes"
	"testing"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runRefiller(t *testing.T) {
	t.Run("RefillAbsent", s.refillAbsent)
	t.Run("RefillKeepsHeld", s.refillKeepsHeld)
	t.Run("RefillAfterInvalidate", s.refillAfterInvalidate)
	t.Run("RefillOnceAcrossClients", s.refillOnceAcrossClients)
}

func (s *suite) refiller(t *testing.T, peer bool) (a, b tier.Refiller) {
	t.Helper()
	return clients[tier.Refiller](t, s, peer)
}

// A key the tier holds nothing of, value or version, takes the write-back.
func (s *suite) refillAbsent(t *testing.T) {
	r, _ := s.refiller(t, false)
	written, held, err := r.Refill(ctx(t), item("ns:k", "from memory"))
	if err != nil || !written || held != nil {
		t.Fatalf("Refill of an absent key = %v, %q, %v; want written", written, held, err)
	}
	mustGet(t, r, "ns:k", []byte("from memory"))
}

// A value the key holds is kept and handed back: a write-back never
// replaces a load.
func (s *suite) refillKeepsHeld(t *testing.T) {
	r, _ := s.refiller(t, false)
	mustSet(t, r, item("ns:k", "loaded"))
	written, held, err := r.Refill(ctx(t), item("ns:k", "from memory"))
	if err != nil || written || !bytes.Equal(held, []byte("loaded")) {
		t.Fatalf("Refill of a held key = %v, %q, %v; want refused with the held value", written, held, err)
	}
	mustGet(t, r, "ns:k", []byte("loaded"))
}

// A key with a version (invalidated since the tier last lost its data)
// takes no write-back, though it holds no value: the copy may predate the
// invalidation.
func (s *suite) refillAfterInvalidate(t *testing.T) {
	r, _ := s.refiller(t, false)
	mustSet(t, r, item("ns:k", "old"))
	mustInvalidate(t, r, "ns:k")
	written, held, err := r.Refill(ctx(t), item("ns:k", "old"))
	if err != nil || written || held != nil {
		t.Fatalf("Refill of an invalidated key = %v, %q, %v; want refused, nothing held", written, held, err)
	}
	mustMiss(t, r, "ns:k")
}

// Of two clients writing the same key back, one lands; the other is handed
// its value.
func (s *suite) refillOnceAcrossClients(t *testing.T) {
	a, b := s.refiller(t, true)
	wa, _, err := a.Refill(ctx(t), item("ns:k", "a"))
	if err != nil || !wa {
		t.Fatalf("first Refill = %v, %v; want written", wa, err)
	}
	var wb bool
	var held []byte
	if !eventually(func() bool {
		wb, held, err = b.Refill(ctx(t), item("ns:k", "b"))
		return err == nil && !wb && bytes.Equal(held, []byte("a"))
	}) {
		t.Fatalf("second client's Refill = %v, %q, %v; want refused with the first one's value", wb, held, err)
	}
	mustGet(t, a, "ns:k", []byte("a"))
}
