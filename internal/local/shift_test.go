package local

import "testing"

// After a shift, the entries neither read nor written since go before any
// newcomer is judged: keys read often before it, read no more, make way for
// new keys read once, as an LRU would let them, while the old keys still
// read stay.
func TestShiftLetsTheStaleGoFirst(t *testing.T) {
	const entries = 1000
	s := readOften(entries)
	s.shifted(s.suspectShift())
	const still = 100 // old keys read after the shift
	for i := range still {
		read(s, i)
	}
	const newcomers = entries / 2
	for i := range newcomers {
		read(s, 1_000_000+i)
	}
	held := 0
	for i := range newcomers {
		if s.Get(key(1_000_000+i), 0) != nil {
			held++
		}
	}
	// A few the window holds at the end are not yet in the main part;
	// none would be held without the shift, each meeting keys read eight
	// times.
	if held < newcomers*95/100 {
		t.Errorf("%d of the %d keys set after the shift are held, want at least 95%%", held, newcomers)
	}
	checkHeld(t, s, still, "read since the shift")
}

// readOften is a full store of entries keys, each read eight times.
func readOften(entries int) *Store[int] {
	s := oneShard(entries)
	s.Seed(1)
	for range 8 {
		for i := range entries {
			read(s, i)
		}
	}
	return s
}

// checkHeld fails t unless s holds the first n keys, read as why says, and
// its bookkeeping holds.
func checkHeld(t *testing.T, s *Store[int], n int, why string) {
	t.Helper()
	for i := range n {
		if s.Get(key(i), 0) == nil {
			t.Errorf("%s, %s, was let go", key(i), why)
		}
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// The detector sees a shift where the hit rate falls for two samples in a
// row and the misses are of new keys, some read again; not where the fall
// is within the noise, where a scan's keys, each read once, take the hit
// rate to nothing, where a loop's misses, all of keys counted before,
// waver, nor where one sample falls and the next is back, as a scan
// shorter than a sample leaves it.
func TestDetectShift(t *testing.T) {
	type sample struct{ rate, repeats float64 }
	for _, c := range []struct {
		name    string
		samples []sample // after ten at a hit rate of 0.5, 0.2 of the misses repeats
		want    bool
	}{
		{"shift", []sample{{0.3, 0.2}, {0.3, 0.2}}, true},
		{"one sample", []sample{{0.3, 0.2}}, false},
		{"back at once", []sample{{0.3, 0.2}, {0.5, 0.2}, {0.3, 0.2}}, false},
		{"small drop", []sample{{0.47, 0.2}, {0.47, 0.2}}, false},
		{"scan", []sample{{0.02, 0.2}, {0.02, 0.2}}, false},
		{"loop", []sample{{0.3, 0.9}, {0.3, 0.9}}, false},
	} {
		var hits uint64
		st := &shiftCounter{}
		cl := &climber{hits: func() uint64 { return hits }, step: -climbStep}
		feed := func(s sample, requests int) {
			misses := 0
			for i := range requests {
				if float64(i%100) < 100*s.rate {
					hits++
					continue
				}
				cl.missed(st, float64(misses%100) < 100*s.repeats)
				misses++
			}
		}
		for range 10 {
			feed(sample{0.5, 0.2}, 4096)
		}
		before := st.shifts
		for _, s := range c.samples {
			feed(s, 4096)
		}
		// A sample ends at the check after its 4,096th request, every
		// 64 misses: a few more of the last kind end the last one.
		feed(c.samples[len(c.samples)-1], 256)
		if got := st.shifts > before; got != c.want {
			t.Errorf("%s: shift seen %v, want %v", c.name, got, c.want)
		}
		if c.want && st.shiftAt != st.suspected {
			t.Errorf("%s: the shift is dated from epoch %d, want the first suspect sample's %d", c.name, st.shiftAt, st.suspected)
		}
	}
}

// shiftCounter is a store whose detector samples 4,096 requests (the test's
// samples) and that counts its shifts and suspected shifts.
type shiftCounter struct {
	shifts             int
	suspected, shiftAt uint32
}

func (s *shiftCounter) capacity() uint64 { return 4096 / shiftSamplePerEntry }
func (s *shiftCounter) suspectShift() uint32 {
	s.suspected++
	return s.suspected
}
func (s *shiftCounter) shifted(epoch uint32) { s.shifts, s.shiftAt = s.shifts+1, epoch }

// A key read after the first sample that looked like a shift, before the
// shift was confirmed, counts as read since it: only the keys read before
// go first.
func TestShiftDatesFromTheFirstSuspectSample(t *testing.T) {
	const entries = 1000
	s := readOften(entries)
	e := s.suspectShift()
	const between = 100 // old keys read between the suspicion and the shift
	for i := range between {
		read(s, i)
	}
	s.suspectShift() // a later suspicion, which the shift is not dated from
	s.shifted(e)
	for i := range entries / 2 {
		read(s, 1_000_000+i)
	}
	checkHeld(t, s, between, "read after the suspicion")
}

// The epochs compare as serial numbers: an entry stamped just before the
// 31-bit epoch wraps is stale against a shift just after it.
func TestStaleAcrossTheEpochsWrap(t *testing.T) {
	var sh shard[int]
	n := &node[int]{}
	n.state.Store((1<<31 - 1) << 1) // the last epoch before the wrap
	sh.shiftAt = 1
	if !sh.stale(n) {
		t.Error("an entry of the epoch before the wrap is not stale against a shift after it")
	}
	sh.shiftAt = 1<<31 - 1
	if sh.stale(n) {
		t.Error("an entry of the shift's own epoch is stale")
	}
	n.state.Store(2 << 1)
	if sh.stale(n) {
		t.Error("an entry of an epoch after the wrap is stale against a shift before it")
	}
}

// A key written again after a shift counts as written since it, as a new
// key does: a refresh is a sign the key is still read.
func TestShiftSparesTheRewritten(t *testing.T) {
	const entries = 1000
	s := readOften(entries)
	s.shifted(s.suspectShift())
	const rewritten = 100
	for i := range rewritten {
		s.Set(key(i), -i, 100, 1<<62, 0)
	}
	// More newcomers than the old keys not written again: once those
	// have gone, the rewritten ones must not go as yesterday's.
	for i := range entries - rewritten/2 {
		read(s, 1_000_000+i)
	}
	checkHeld(t, s, rewritten, "written since the shift")
}
