package tiertest

import (
	"bytes"
	"testing"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runSmearer(t *testing.T) {
	t.Run("Copies", s.copies)
	t.Run("SetSmearedCurrent", s.setSmearedCurrent)
	t.Run("SetSmearedStale", s.setSmearedStale)
	t.Run("GetSmearedUnsmeared", s.getSmearedUnsmeared)
	t.Run("InvalidateRemovesCopies", s.invalidateRemovesCopies)
	t.Run("InvalidateRemovesFilledCopies", s.invalidateRemovesFilledCopies)
	t.Run("DeadContext", s.smearDeadContext)
}

// smearer opens a fresh tier's client as a Smearer (and a second client
// with peer). It returns nil when the tier keeps one copy: the Cache then
// makes none of the smeared calls, so there is nothing to check.
func (s *suite) smearer(t *testing.T, peer bool) (a, b tier.Smearer) {
	t.Helper()
	a, b = clients[tier.Smearer](t, s, peer)
	if n := a.Copies(); n <= 1 {
		t.Logf("Copies() = %d: the tier does not smear now, and the Cache makes no smeared call", n)
		return nil, nil
	}
	return a, b
}

// smearedReads is how many GetSmeared calls a check makes: enough that each
// copy is read with near certainty (n reads of c copies at random miss a
// given one with probability (1-1/c)^n, about e^-32 for n = 32c).
func smearedReads(sm tier.Smearer) int { return 32 * sm.Copies() }

// readAllSmeared reads key smearedReads times and fails on any answer but
// want (nil: a miss).
func readAllSmeared(t *testing.T, sm tier.Smearer, key string, want []byte, what string) {
	t.Helper()
	for i := range smearedReads(sm) {
		v, found, err := sm.GetSmeared(ctx(t), key)
		switch {
		case err != nil:
			t.Fatalf("%s: GetSmeared(%q) read %d: %v", what, key, i, err)
		case want == nil && found:
			t.Fatalf("%s: GetSmeared(%q) read %d = %q; want a miss", what, key, i, short(v))
		case want != nil && (!found || !bytes.Equal(v, want)):
			t.Fatalf("%s: GetSmeared(%q) read %d = %q, found %v; want %q", what, key, i, short(v), found, want)
		}
	}
}

// Copies counts the key itself: never below 1.
func (s *suite) copies(t *testing.T) {
	x := s.open(t).(tier.Smearer)
	if n := x.Copies(); n < 1 {
		t.Errorf("Copies() = %d; want at least 1 (the key itself)", n)
	}
}

// SetSmearedIfVersion with the key's version writes the key and every
// copy: each read of a copy finds the value.
func (s *suite) setSmearedCurrent(t *testing.T) {
	sm, _ := s.smearer(t, false)
	if sm == nil {
		return
	}
	ok, err := sm.SetSmearedIfVersion(ctx(t), item("ns:hot", "smeared"), 0)
	if err != nil || !ok {
		t.Fatalf("SetSmearedIfVersion at the current version = %v, %v; want written", ok, err)
	}
	mustGet(t, sm, "ns:hot", []byte("smeared"))
	readAllSmeared(t, sm, "ns:hot", []byte("smeared"), "after SetSmearedIfVersion")
}

// SetSmearedIfVersion with a version an invalidation has passed writes
// neither the key nor any copy.
func (s *suite) setSmearedStale(t *testing.T) {
	sm, _ := s.smearer(t, false)
	if sm == nil {
		return
	}
	mustInvalidate(t, sm, "ns:hot")
	ok, err := sm.SetSmearedIfVersion(ctx(t), item("ns:hot", "read before the invalidation"), 0)
	if err != nil || ok {
		t.Fatalf("SetSmearedIfVersion with the version from before an invalidation = %v, %v; want refused", ok, err)
	}
	mustMiss(t, sm, "ns:hot")
	readAllSmeared(t, sm, "ns:hot", nil, "after a refused SetSmearedIfVersion")
}

// A copy that misses is answered by the key itself: a key written plainly
// (before it turned hot) reads the same through GetSmeared.
func (s *suite) getSmearedUnsmeared(t *testing.T) {
	sm, _ := s.smearer(t, false)
	if sm == nil {
		return
	}
	mustSet(t, sm, item("ns:plain", "plain"))
	readAllSmeared(t, sm, "ns:plain", []byte("plain"), "a key written with Set")
	readAllSmeared(t, sm, "ns:never", nil, "a key never written")
}

// Invalidate removes every copy, by whichever client: no copy of the old
// value stays readable. The invalidating client reads its own deletions
// at once; the other may lag as a replica does, and must catch up.
func (s *suite) invalidateRemovesCopies(t *testing.T) {
	a, b := s.smearer(t, true)
	if a == nil {
		return
	}
	if ok, err := a.SetSmearedIfVersion(ctx(t), item("ns:hot", "old"), 0); err != nil || !ok {
		t.Fatalf("SetSmearedIfVersion = %v, %v", ok, err)
	}
	mustInvalidate(t, b, "ns:hot")
	readAllSmeared(t, b, "ns:hot", nil, "the invalidating client, after Invalidate")
	if !eventually(func() bool {
		for range smearedReads(a) {
			if _, found, err := a.GetSmeared(ctx(t), "ns:hot"); err != nil || found {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the other client still read a copy %v after Invalidate", Patience)
	}
	readAllSmeared(t, a, "ns:hot", nil, "the other client, after Invalidate")
}

// Copies a tier made by itself (from a plain key read through GetSmeared)
// are removed by Invalidate too, and none is made again from the old
// value afterwards.
func (s *suite) invalidateRemovesFilledCopies(t *testing.T) {
	sm, _ := s.smearer(t, false)
	if sm == nil {
		return
	}
	mustSet(t, sm, item("ns:hot", "old"))
	readAllSmeared(t, sm, "ns:hot", []byte("old"), "before Invalidate")
	mustInvalidate(t, sm, "ns:hot")
	for range 3 {
		readAllSmeared(t, sm, "ns:hot", nil, "after Invalidate")
	}
}

// The smeared calls honour an ended context.
func (s *suite) smearDeadContext(t *testing.T) {
	sm, _ := s.smearer(t, false)
	if sm == nil {
		return
	}
	for name, dc := range dead(t) {
		_, found, err := sm.GetSmeared(dc, "ns:k")
		checkDead(t, "GetSmeared", name, dc, err)
		if found {
			t.Errorf("GetSmeared with a context %s reported a hit", name)
		}
		ok, err := sm.SetSmearedIfVersion(dc, item("ns:k", "v"), 0)
		checkDead(t, "SetSmearedIfVersion", name, dc, err)
		if ok {
			t.Errorf("SetSmearedIfVersion with a context %s reported a write", name)
		}
	}
}
