package local

// sketch is a count-min sketch of 4-bit counters: the popularity of keys
// the store holds and of keys it has let go, in a few bits a key. It is the
// frequency filter of TinyLFU (Einziger, Friedman and Manes, 2017), as
// Caffeine and otter keep it: four counters a key, all in one 64-byte block
// so that a look-up touches one cache line, halved together every sample of
// ten times the keys the sketch is sized for, so that what was popular long
// ago fades. It belongs to its shard's lock.
type sketch struct {
	table     []uint64 // 16 counters a word; a key's four lie in one block of 8 words
	blockMask uint64   // blocks-1
	additions int      // counted since the last halving
	sample    int      // additions between halvings
	halvings  uint8    // how many halvings, mod 256: see count
}

// sketchMin is the fewest keys a sketch is sized for.
const sketchMin = 64

// ensure sizes s for at least keys keys. A key's counters lie in block
// h>>blockShift&blockMask, so doubling the table puts them in block b or
// b+blocks: a table grown by copies of itself gives every key the counts
// it had, and a shard filling up keeps what it learnt while it filled.
func (s *sketch) ensure(keys int) {
	if keys < sketchMin {
		keys = sketchMin
	}
	if len(s.table) >= keys {
		return
	}
	n := max(8, len(s.table)) // words: at least one block
	for n < keys {
		n <<= 1
	}
	t := make([]uint64, n)
	for i := 0; len(s.table) > 0 && i < n; i += len(s.table) {
		copy(t[i:], s.table)
	}
	s.table = t
	s.blockMask = uint64(n/8 - 1)
	s.sample = 10 * n
}

// spread is a 64-bit mixer (the finalizer of SplitMix64), which turns a
// seed into keys (newHasher) and shard numbers into xorshift states.
func spread(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// blockShift skips the low bits of the store's hash, which pick the shard
// (at most 1,024 of them) and so are alike in all of a sketch's keys. The
// hash is mixed already, so the sketch takes its bits from it as they are:
// mixing them again cost each write 30 instructions, a tenth of the policy.
const blockShift = 10

// block is the 8 words holding the counters of key hash h.
func (s *sketch) block(h uint64) *[8]uint64 {
	b := (h >> blockShift & s.blockMask) * 8
	return (*[8]uint64)(s.table[b : b+8])
}

// The i-th of a key's four counters (i < 4) is in word 2i or 2i+1 of its
// block, a nibble picked by 4 more bits: 5 bits of h each, from bit 32 on.
func counterWord(h uint64, i uint) uint64  { return 2*uint64(i) + h>>(32+8*i)&1 }
func counterShift(h uint64, i uint) uint64 { return (h >> (33 + 8*i) & 15) * 4 }

// estimate is h's count: the least of its four counters. The four are
// written out, not looped over: their loads are independent, and a write's
// admission waits on two estimates, each a likely cache miss.
func (s *sketch) estimate(h uint64) int {
	if s.table == nil {
		return 0
	}
	b := s.block(h)
	c0 := b[counterWord(h, 0)&7] >> counterShift(h, 0) & 15
	c1 := b[counterWord(h, 1)&7] >> counterShift(h, 1) & 15
	c2 := b[counterWord(h, 2)&7] >> counterShift(h, 2) & 15
	c3 := b[counterWord(h, 3)&7] >> counterShift(h, 3) & 15
	return int(min(c0, c1, c2, c3))
}

// increment adds one to the counter at bit sh of word w of b, short of 15,
// and returns the counter.
func increment(b *[8]uint64, w, sh uint64) uint64 {
	c := b[w] >> sh & 15
	if c < 15 {
		b[w] += 1 << sh
		c++
	}
	return c
}

// add counts one more use of h, each counter saturating at 15, and halves
// every counter when a sample is complete. It returns h's count after the
// addition, as estimate would.
func (s *sketch) add(h uint64) uint8 {
	if s.table == nil {
		return 0
	}
	b := s.block(h)
	// Written out, as in estimate: the four counters lie in four
	// different words, so the increments are independent.
	c0 := increment(b, counterWord(h, 0)&7, counterShift(h, 0))
	c1 := increment(b, counterWord(h, 1)&7, counterShift(h, 1))
	c2 := increment(b, counterWord(h, 2)&7, counterShift(h, 2))
	c3 := increment(b, counterWord(h, 3)&7, counterShift(h, 3))
	c := uint8(min(c0, c1, c2, c3))
	s.additions++
	if s.additions >= s.sample {
		s.halve()
		c >>= 1
	}
	return c
}

// count is a held key's count: what add returned when the key was last
// counted (c, after halving number at), halved as the sketch has been
// since. A held key is counted only through its node, so this is its
// estimate less what other keys have added to its counters since: never
// more than the estimate.
func (s *sketch) count(c, at uint8) int {
	return int(c) >> min(s.halvings-at, 4)
}

// halve halves every counter: at the end of a sample, and at a shift of
// the popular keys (Store.shifted).
func (s *sketch) halve() {
	for i, w := range s.table {
		s.table[i] = w >> 1 & 0x7777777777777777
	}
	s.additions /= 2
	s.halvings++
}
