package local

import "testing"

// After a shift, the entries neither read nor written since go before any
// newcomer is judged: keys read often before it, read no more, make way for
// new keys read once, as an LRU would let them, while the old keys still
// read stay.
func TestShiftLetsTheStaleGoFirst(t *testing.T) {
	const entries = 1000
	s := oneShard(entries)
	s.Seed(1)
	for range 8 {
		for i := range entries {
			read(s, i)
		}
	}
	s.shifted()
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
	for i := range still {
		if s.Get(key(i), 0) == nil {
			t.Errorf("%s, read since the shift, was let go", key(i))
		}
	}
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

// The detector sees a shift where the hit rate falls and the misses are of
// new keys, some read again; not where the fall is within the noise, where
// a scan's keys, each read once, take the hit rate to nothing, nor where a
// loop's misses, all of keys counted before, waver.
func TestDetectShift(t *testing.T) {
	for _, c := range []struct {
		name          string
		rate, repeats float64 // the sample after ten at a hit rate of 0.5, 0.2 of the misses repeats
		want          bool
	}{
		{"shift", 0.3, 0.2, true},
		{"small drop", 0.47, 0.2, false},
		{"scan", 0.02, 0.2, false},
		{"loop", 0.3, 0.9, false},
	} {
		var hits uint64
		st := &shiftCounter{}
		cl := &climber{hits: func() uint64 { return hits }, step: -climbStep}
		sample := func(rate, repeats float64) {
			misses := 0
			for i := range 4096 {
				if float64(i%100) < 100*rate {
					hits++
					continue
				}
				cl.missed(st, float64(misses%100) < 100*repeats)
				misses++
			}
		}
		for range 10 {
			sample(0.5, 0.2)
		}
		before := st.shifts
		sample(c.rate, c.repeats)
		if got := st.shifts > before; got != c.want {
			t.Errorf("%s: shift seen %v, want %v", c.name, got, c.want)
		}
	}
}

// shiftCounter is a store of 1,000 entries that counts its shifts.
type shiftCounter struct{ shifts int }

func (s *shiftCounter) capacity() uint64 { return 1000 }
func (s *shiftCounter) shifted()         { s.shifts++ }
