package lab

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// The naive mode's two-level cache: the local map answers within its TTL,
// even after another process's update; past it the read goes to Redis,
// where the writer's delete makes it load the new version.
func TestNaiveLocalTTL(t *testing.T) {
	srv, err := redistest.Launch(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	src := NewSource(SourceConfig{})
	src.Begin(time.Now(), 0, 0)
	ctx := context.Background()
	cfg := ReaderConfig{RedisAddrs: []string{srv.Addr()}, Load: src.Load, TTL: time.Minute, LocalTTL: 300 * time.Millisecond}
	reader, err := NewNaive(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	writer, err := NewNaive(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	tr := reader.(tieredReader)
	get := func() (int64, bool) {
		t.Helper()
		v, local, _, err := tr.GetTiered(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		return ValueVersion(v), local
	}
	if v, local := get(); v != 0 || local {
		t.Fatalf("first read: version %d, local %v", v, local)
	}
	if v, local := get(); v != 0 || !local {
		t.Fatalf("second read: version %d, local %v", v, local)
	}
	src.Update("k")
	if err := writer.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if v, local := get(); v != 0 || !local {
		t.Fatalf("after another process's update: version %d, local %v; want the local entry", v, local)
	}
	time.Sleep(350 * time.Millisecond)
	if v, local := get(); v != 1 || local {
		t.Fatalf("past the local TTL: version %d, local %v; want 1 from the source", v, local)
	}
	if st := reader.Stats(); st["local_hits"] != 2 || st["local_entries"] != 1 {
		t.Fatalf("stats %v", st)
	}
}
