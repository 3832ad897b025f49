package local

import (
	"testing"
	"unsafe"
)

// SizeClass agrees with the allocator: append to a nil slice allocates
// exactly the rounded size, and its capacity shows it.
func TestSizeClass(t *testing.T) {
	check := func(n int) {
		t.Helper()
		if got, want := SizeClass(n), int64(cap(append([]byte(nil), make([]byte, n)...))); got != want {
			t.Fatalf("SizeClass(%d) = %d, the allocator gives %d", n, got, want)
		}
	}
	for n := range 1024 {
		check(n)
	}
	for _, c := range sizeClasses[1:] {
		check(int(c) - 1)
		check(int(c))
		check(int(c) + 1)
	}
	for _, n := range []int{maxSmall + 1, 40_000, 3*pageSize + 1, 1 << 20, 1<<20 + 40} {
		check(n)
	}
}

// What an entry is charged: its key's bytes and its node as allocated, the
// map's and the sketch's shares, and what the caller says its value holds.
func TestCost(t *testing.T) {
	s := New[struct{}](1 << 20)
	if s.nodeBytes != SizeClass(int(unsafe.Sizeof(node[struct{}]{}))) || s.nodeBytes < int64(unsafe.Sizeof(node[struct{}]{})) {
		t.Fatalf("node of %d bytes charged %d", unsafe.Sizeof(node[struct{}]{}), s.nodeBytes)
	}
	fixed := s.nodeBytes + mapEntryBytes + sketchEntryBytes
	for _, c := range []struct {
		key  string
		held int64
		want int64
	}{
		{"", 0, fixed},
		{"k", 0, fixed + 8},                         // a 1-byte key takes 8
		{"q:0000000001", 0, fixed + 16},             // 12 bytes take 16
		{string(make([]byte, 17)), 0, fixed + 24},   // 17 take 24
		{string(make([]byte, 513)), 0, fixed + 576}, // 513 take 576
		{"k", 18432, fixed + 8 + 18432},
	} {
		if got := s.Cost(c.key, c.held); got != c.want {
			t.Errorf("Cost(%d-byte key, %d held) = %d, want %d", len(c.key), c.held, got, c.want)
		}
	}
	s.Set("k", struct{}{}, 100, 1<<62, 0)
	if st := s.Stats(); st.Bytes != fixed+8+100 {
		t.Fatalf("Stats().Bytes = %d after one entry costing %d", st.Bytes, fixed+8+100)
	}
	// A value too large for a shard is refused by its whole cost.
	per := s.shards[0].maxBytes
	if s.Set("k", struct{}{}, per-fixed, 1<<62, 0) {
		t.Fatal("stored an entry whose cost is over a shard's share")
	}
}
