package local

import "slices"

// mapEntryBytes is what one key costs in the Store's index beyond the key's
// bytes and the node (whose size counts its hash and chain link): its share
// of its shard's bucket table, one 8-byte pointer a bucket. A table doubles
// when its entries outnumber its buckets, so it holds one to two buckets an
// entry: 16 bytes just past a doubling. It is measured, not derived
// (TestIndexBytes): the live heap after two runtime.GCs, less the heap
// before, over the entries of stores of 0.5 to 18 MiB (4,000 to 136,000
// entries) sized for each shard to sit just past a doubling, filled and then
// replaced by evictions, less each entry's node and key bytes, came to 15.5
// bytes an entry in the largest and 19.5 in the smallest, where the shards'
// fixed parts weigh more (Go 1.26, amd64, 32 shards; 9 to 14 in stores of 1
// to 32 MiB filled once to 90%, never evicting). Rounded up, so that a store
// that has run a while does not go over its budget. TestCostMatchesHeap
// checks it against the heap.
const mapEntryBytes = 24

// sketchEntryBytes is what one entry costs in its shard's frequency sketch:
// a word of 16 counters an entry, the words a power of two, so 8 to 16
// bytes (see sketch.ensure). Charged at its largest, as the index's share
// is, and measured with it by TestIndexBytes.
const sketchEntryBytes = 16

// Cost is what an entry of key whose value holds held bytes (see Set) costs
// in s: the key's bytes and the node as allocated, the map's and the
// sketch's shares and held.
// Each store charges the whole of it, so two stores sharing a key or a
// value's bytes each count them.
func (s *Store[V]) Cost(key string, held int64) int64 {
	return SizeClass(len(key)) + s.nodeBytes + mapEntryBytes + sketchEntryBytes + held
}

// sizeClasses are the sizes the Go allocator hands out for objects up to
// maxSmall bytes (runtime size classes, internal/runtime/gc/sizeclasses.go):
// a 16,424-byte slice takes 18,432 bytes. TestSizeClass checks them against
// what append allocates, so a runtime that changes them fails the test.
var sizeClasses = [...]int32{0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

const (
	maxSmall = 32 << 10 // larger objects get whole pages
	pageSize = 8 << 10
)

// smallClasses[(n+7)/8] is SizeClass(n) for n up to 1,024, as the
// runtime's own size_to_class8 finds it (every class below is a multiple of
// 8): Set costs every key it stores, and a table look-up is cheaper than a
// search.
var smallClasses = func() (t [1024/8 + 1]int32) {
	for i := range t {
		j, _ := slices.BinarySearch(sizeClasses[:], int32(8*i))
		t[i] = sizeClasses[j]
	}
	return t
}()

// SizeClass returns the bytes the Go allocator takes for an object of n
// bytes with no pointers (a []byte's or a string's backing array).
func SizeClass(n int) int64 {
	if uint(n) <= 1024 {
		return int64(smallClasses[(n+7)>>3])
	}
	if n > maxSmall {
		return int64((n + pageSize - 1) &^ (pageSize - 1))
	}
	i, _ := slices.BinarySearch(sizeClasses[:], int32(n))
	return int64(sizeClasses[i])
}
