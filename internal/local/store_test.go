package local

import (
	"fmt"
	"sync"
	"testing"
)

func TestGetSetExpiry(t *testing.T) {
	s := New[string](1 << 20)
	s.Set("a", "A", 10, 100, 0)
	if v := s.Get("a", 99); v == nil || *v != "A" {
		t.Fatalf("Get before expiry = %v", v)
	}
	if v := s.Get("a", 100); v != nil {
		t.Fatalf("Get at expiry = %q, want nil", *v)
	}
	s.Set("a", "B", 10, 200, 0)
	if v := s.Get("a", 150); v == nil || *v != "B" {
		t.Fatalf("Get after replace = %v", v)
	}
	if st := s.Stats(); st.Entries != 1 || st.Bytes != s.Cost("a", 10) {
		t.Fatalf("stats after replace = %+v, want 1 entry of %d bytes", st, s.Cost("a", 10))
	}
	s.Delete("a")
	if v := s.Get("a", 0); v != nil {
		t.Fatal("Get after Delete found a value")
	}
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("stats after delete = %+v", st)
	}
}

func TestBoundedInBytes(t *testing.T) {
	s := New[int](64 * 1024)
	for i := range 10_000 {
		s.Set(fmt.Sprint(i), i, 100, 1<<62, 0)
	}
	st := s.Stats()
	if st.Bytes > 64*1024 {
		t.Fatalf("holds %d bytes, over the 64 KiB bound", st.Bytes)
	}
	if st.Evicted == 0 || st.Entries == 0 || uint64(st.Entries)+st.Evicted != 10_000 {
		t.Fatalf("stats %+v: entries + evicted must be the 10,000 sets", st)
	}
	if s.Set("too-big", 0, 1<<20, 1<<62, 0) {
		t.Fatal("Set accepted a value larger than a shard's share")
	}
	if v := s.Get("too-big", 0); v != nil {
		t.Fatal("a value larger than a shard's share was stored")
	}
}

func TestConcurrent(t *testing.T) {
	s := New[int](1 << 16)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5_000 {
				k := fmt.Sprint((i * (g + 1)) % 500)
				switch i % 4 {
				case 0:
					s.Set(k, i, 64, int64(i+1000), 0)
				case 1:
					s.Delete(k)
				default:
					if v := s.Get(k, int64(i)); v != nil && *v < 0 {
						t.Error("impossible value")
					}
				}
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	if per := s.Cost("0", 64); st.Bytes != int64(st.Entries)*per {
		t.Fatalf("byte count %d does not match %d entries of %d bytes", st.Bytes, st.Entries, per)
	}
	s.Clear()
	if st := s.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("after Clear: %+v", st)
	}
}
