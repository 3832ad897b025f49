package local

import (
	"hash/maphash"
	"strconv"
	"strings"
	"testing"
)

// TestHashSeeded: a seed gives the same hash in every store, and two seeds
// give unrelated ones.
func TestHashSeeded(t *testing.T) {
	a, b, c := newHasher(1), newHasher(1), newHasher(2)
	for _, k := range []string{"", "a", "abc", "abcd", "product:42", "0123456789abcdef", strings.Repeat("x", 100)} {
		if a.string(k) != b.string(k) {
			t.Errorf("%q: two hashers of seed 1 disagree", k)
		}
		if a.string(k) == c.string(k) {
			t.Errorf("%q: seeds 1 and 2 hash alike", k)
		}
	}
	s1, s2 := New[int](1<<20), New[int](1<<20)
	s1.Seed(7)
	s2.Seed(7)
	for i := range 1000 {
		k := "key:" + strconv.Itoa(i)
		if h1, _ := s1.locate(k); h1 != func() uint64 { h, _ := s2.locate(k); return h }() {
			t.Fatalf("%q: stores seeded alike hash it apart", k)
		}
	}
}

// TestHashReadsOnlyItsBytes: a key's hash is the same whatever follows it
// in memory, at every length, so no length makes it read past the key.
func TestHashReadsOnlyItsBytes(t *testing.T) {
	h := newHasher(3)
	buf := strings.Repeat("holdfast-", 20)
	for n := range 120 {
		own := strings.Clone(buf[:n])
		inside := buf[:n] // followed by more bytes
		if h.string(own) != h.string(inside) {
			t.Fatalf("length %d: the hash read the bytes after the key", n)
		}
		other := strings.Clone(buf[:n]) + "zzzzzzzz"
		if h.string(other[:n]) != h.string(own) {
			t.Fatalf("length %d: the hash read the bytes after the key", n)
		}
	}
}

// TestHashAvalanche: flipping any one bit of a key flips each bit of its
// hash about half the time, at every length up to 64 bytes: the low bits
// pick a key's shard and the sketch mixes the hash again, but the top bits
// pick its bucket as they are.
func TestHashAvalanche(t *testing.T) {
	h := newHasher(5)
	for n := 1; n <= 64; n++ {
		key := []byte(strings.Repeat("k", n))
		var flips [64]int
		trials := 0
		for i := range key {
			for bit := range 8 {
				for v := range 8 { // a few base keys per bit
					key[0] = byte('a' + v)
					base := h.string(string(key))
					key[i] ^= 1 << bit
					d := base ^ h.string(string(key))
					key[i] ^= 1 << bit
					if d == 0 {
						t.Fatalf("length %d: flipping bit %d of byte %d left the hash as it was", n, bit, i)
					}
					for o := range 64 {
						flips[o] += int(d >> o & 1)
					}
					trials++
				}
			}
		}
		for o, f := range flips {
			if r := float64(f) / float64(trials); r < 0.3 || r > 0.7 {
				t.Errorf("length %d: output bit %d flipped in %.2f of %d one-bit changes", n, o, r, trials)
			}
		}
	}
}

// TestHashFixed: a seed's hash of a key is the same in every process, which
// a hash keyed by anything the process draws (as hash/maphash's is) would
// not be; the figure is what this hash gave when it was written.
func TestHashFixed(t *testing.T) {
	h := newHasher(1)
	if got := h.string("product:42"); got != 0xa4e454389ba494a6 {
		t.Fatalf("seed 1 hashed %q to %#x", "product:42", got)
	}
}

// BenchmarkHash is the store's hash beside hash/maphash's, which the store
// used before it needed a seed of its own, on keys of 10 to 40 bytes.
//
//	go test -run '^$' -bench Hash -count 6 ./internal/local
func BenchmarkHash(b *testing.B) {
	keys := []string{"product:42", "0123456789abcdef", "namespace:product:0000012345", "namespace:search:a-much-longer-prefix"}
	h := newHasher(1)
	seed := maphash.MakeSeed()
	b.Run("store", func(b *testing.B) {
		var sum uint64
		for i := range b.N {
			sum += h.string(keys[i&3])
		}
		sink = sum
	})
	b.Run("maphash", func(b *testing.B) {
		var sum uint64
		for i := range b.N {
			sum += maphash.String(seed, keys[i&3])
		}
		sink = sum
	})
}

var sink uint64
