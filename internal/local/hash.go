package local

import (
	"math/bits"
	"math/rand/v2"
	"unsafe"
)

// hasher is a store's key hash: the construction of the Go runtime's own
// string hash where the processor has no AES instructions (runtime
// hash64.go, after wyhash), keyed by four words drawn from a seed. The
// store uses it instead of hash/maphash because maphash's keys come from
// the process (its AES key schedule is drawn at start-up), so no seed makes
// two processes hash alike: the hash picks a key's shard and its counters
// in the sketch, and so which keys the policy keeps. Seeded (Store.Seed),
// a store replays a sequence to the same evictions in every run, which is
// what lets a hit-ratio comparison be repeated; seeded at random, as New
// seeds it, keys chosen to collide are no easier to find than the
// runtime's.
type hasher [4]uint64

// newHasher expands seed into a hasher's keys with SplitMix64, so that
// nearby seeds give unrelated keys.
func newHasher(seed uint64) hasher {
	var h hasher
	for i := range h {
		seed += 0x9e3779b97f4a7c15
		h[i] = spread(seed) | 1
	}
	return h
}

func randomHasher() hasher { return newHasher(rand.Uint64()) }

const hashM5 = 0x1d8e4e27c47d124f

func hashMix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// read8 and read4 load little-endian words of s at i, which the caller
// keeps within s: the compiler makes each one load.
func read8(p unsafe.Pointer, i int) uint64 {
	b := (*[8]byte)(unsafe.Add(p, i))
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func read4(p unsafe.Pointer, i int) uint64 {
	b := (*[4]byte)(unsafe.Add(p, i))
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
}

// string hashes s.
func (k *hasher) string(s string) uint64 {
	p := unsafe.Pointer(unsafe.StringData(s))
	n := len(s)
	seed := k[0]
	var a, b uint64
	switch {
	case n == 0:
		return hashMix(hashM5, seed^k[1])
	case n < 4:
		a = uint64(*(*byte)(p)) | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))<<16
	case n < 8:
		a, b = read4(p, 0), read4(p, n-4)
	case n <= 16:
		a, b = read8(p, 0), read8(p, n-8)
	default:
		l, off := n, 0
		if l > 48 {
			seed1, seed2 := seed, seed
			for ; l > 48; l -= 48 {
				seed = hashMix(read8(p, off)^k[1], read8(p, off+8)^seed)
				seed1 = hashMix(read8(p, off+16)^k[2], read8(p, off+24)^seed1)
				seed2 = hashMix(read8(p, off+32)^k[3], read8(p, off+40)^seed2)
				off += 48
			}
			seed ^= seed1 ^ seed2
		}
		for ; l > 16; l -= 16 {
			seed = hashMix(read8(p, off)^k[1], read8(p, off+8)^seed)
			off += 16
		}
		a, b = read8(p, off+l-16), read8(p, off+l-8)
	}
	return hashMix(hashM5^uint64(n), hashMix(a^k[1], b^seed))
}
