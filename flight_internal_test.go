package holdfast

import "testing"

// A flight goes back to the pool only when no one but its leader ever saw
// it: a reader that joined it may still wait on its outcome, and an
// invalidation that detached it may still hold its store lock.
func TestFlightLeaveRecyclesOnlyUnseen(t *testing.T) {
	g := newFlightGroup()

	f, leader := g.join("alone")
	if !leader {
		t.Fatal("the first reader does not lead")
	}
	if !g.leave("alone", f) {
		t.Error("a flight no one joined was not recycled")
	}
	if g.inProgress("alone") {
		t.Error("the flight is still in the group after leave")
	}

	f, _ = g.join("joined")
	if j, leader := g.join("joined"); leader || j != f {
		t.Fatal("the second reader did not join the first's flight")
	}
	if g.leave("joined", f) {
		t.Error("a flight a reader joined was recycled")
	}
	if f.seen != true {
		t.Error("the joined flight's mark was cleared")
	}

	f, _ = g.join("invalidated")
	g.invalidate("invalidated")
	if g.leave("invalidated", f) {
		t.Error("a flight an invalidation detached was recycled")
	}
	if !f.invalidated {
		t.Error("the detached flight lost its invalidation")
	}
}

// A recycled flight starts clean: nothing of its last key's outcome,
// stage or marks.
func TestFlightRecycledClean(t *testing.T) {
	g := newFlightGroup()
	for range 100 {
		f, _ := g.join("k")
		if f.seen || f.published || f.ended || f.invalidated || f.copy != nil || f.readOver.Load() || f.firstOut.res.Value != nil {
			t.Fatalf("a flight from the pool is not clean: %+v", f)
		}
		f.readOver.Store(true)
		f.firstOut.res.Value = []byte("v")
		if !g.leave("k", f) {
			t.Fatal("an unseen flight was not recycled")
		}
	}
}
