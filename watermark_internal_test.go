package holdfast

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/local"
)

// The watermarks keep at most maxWatermarks keys, forget the oldest first,
// and forget entries past the window.
func TestWatermarksBounded(t *testing.T) {
	var r watermarks
	const window = int64(1 << 62) // nothing ages out
	total := 2*maxWatermarks + 17
	var forgotten int
	for i := range total {
		r.raise(fmt.Sprint("k", i), watermark{own: int64(i + 1)}, window, func(string, watermark) { forgotten++ })
	}
	if got := r.keys(); got != maxWatermarks {
		t.Fatalf("%d keys remembered, want %d", got, maxWatermarks)
	}
	if forgotten != total-maxWatermarks {
		t.Fatalf("%d forgotten reported, want %d", forgotten, total-maxWatermarks)
	}
	if live := len(r.queue) - r.head; live != maxWatermarks {
		t.Fatalf("%d live queue entries, want %d", live, maxWatermarks)
	}
	if len(r.queue) > 2*maxWatermarks+1 {
		t.Fatalf("queue of %d entries for %d remembered: forgotten ones are never cut off", len(r.queue), maxWatermarks)
	}
	now := int64(total + 1)
	oldest, newest := fmt.Sprint("k", total-maxWatermarks-1), fmt.Sprint("k", total-1)
	if g := r.grade(oldest, 0, now, window); g != gradeCurrent {
		t.Errorf("%s, past the bound, is still remembered (grade %d)", oldest, g)
	}
	if g := r.grade(newest, 0, now, window); g != gradeNone {
		t.Errorf("%s, the newest, graded %d, want none", newest, g)
	}

	// A short window forgets everything older than it on the next raise.
	forgotten = 0
	r.raise("late", watermark{own: now + 1000}, 10, func(string, watermark) { forgotten++ })
	if got := r.keys(); got != 1 || forgotten != maxWatermarks {
		t.Fatalf("%d keys remembered after the window passed (%d forgotten), want 1 (%d)", got, forgotten, maxWatermarks)
	}
}

func (r *watermarks) keys() (n int) {
	r.at.Range(func(any, any) bool { n++; return true })
	return n
}

// A copy older than this process's own invalidation is never served; one
// no newer than another process's is a fallback; an older invalidation
// heard later does not lower the mark.
func TestWatermarkGrades(t *testing.T) {
	var r watermarks
	const window = 1000
	none := func(string, watermark) {}
	r.raise("k", watermark{own: 100}, window, none)
	r.raise("k", watermark{other: 200}, window, none)
	r.raise("k", watermark{other: 150}, window, none) // a clock behind: the mark stays at 200
	for _, c := range []struct {
		origin int64
		want   grade
	}{{99, gradeNone}, {100, gradeFallback}, {200, gradeFallback}, {201, gradeCurrent}} {
		if g := r.grade("k", c.origin, 300, window); g != c.want {
			t.Errorf("origin %d graded %d, want %d", c.origin, g, c.want)
		}
	}
	if g := r.grade("k", 150, 200+window, window); g != gradeCurrent {
		t.Errorf("past the window graded %d, want current", g)
	}
	if g := r.grade("other", 0, 300, window); g != gradeCurrent {
		t.Errorf("a key never invalidated graded %d, want current", g)
	}
}

// When the bound forgets a watermark that left a copy in last-known-good a
// fallback, the copy goes too: it would read as current again.
func TestForgottenWatermarkDropsItsFallback(t *testing.T) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.Namespace("product", Policy{StaleIfError: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := n.now()
	for _, k := range []string{"k", "kept"} {
		m := n.newEntry([]byte("v"), now, 0, false, nil)
		n.lkg.Set(k, m, local.SizeClass(cap(m.raw)), n.staleUntil(&m), now)
	}
	n.raiseMark("k", watermark{other: now})
	if g := n.grade("k", n.lkg.Get("k", now), now); g != gradeFallback {
		t.Fatalf("the copy graded %d after another process's invalidation, want a fallback", g)
	}
	for i := range maxWatermarks {
		n.raiseMark(fmt.Sprint("x", i), watermark{own: now})
	}
	if n.lkg.Get("k", now) != nil {
		t.Fatal("the fallback outlived its watermark: it reads as current")
	}
	if n.lkg.Get("kept", now) == nil {
		t.Fatal("a copy no watermark superseded was dropped")
	}
}

// Keys keep holds on to outlive the bound and the window, out of the
// queue, and are forgotten as the others once requeued.
func TestWatermarksKeepPastTheBound(t *testing.T) {
	var r watermarks
	const window = int64(1 << 40)
	held := map[string]bool{}
	r.keep = func(key string) bool { return held[key] }
	forgotten := 0
	count := func(string, watermark) { forgotten++ }
	var kept []string
	for i := range 10 {
		k := fmt.Sprint("p", i)
		held[k] = true
		kept = append(kept, k)
		r.raise(k, watermark{own: int64(i + 1)}, window, count)
	}
	total := 2 * maxWatermarks
	for i := range total {
		r.raise(fmt.Sprint("k", i), watermark{own: int64(11 + i)}, window, count)
	}
	now := int64(total + 20)
	for _, k := range kept {
		if g := r.grade(k, 0, now, window); g != gradeNone {
			t.Fatalf("%s, kept, graded %d after %d other raises, want none", k, g, total)
		}
	}
	if got, want := r.keys(), maxWatermarks+10; got != want || forgotten != total-maxWatermarks {
		t.Fatalf("%d keys remembered (%d forgotten), want %d (%d)", got, forgotten, want, total-maxWatermarks)
	}
	if live := len(r.queue) - r.head; live != maxWatermarks {
		t.Fatalf("%d live queue entries, want %d: kept keys wait outside it", live, maxWatermarks)
	}

	// Past the window a kept key is still kept; requeued once its replay
	// landed, it is forgotten as any other.
	r.raise("late", watermark{own: window * 4}, window, count)
	if got := r.keys(); got != 11 {
		t.Fatalf("%d keys remembered past the window, want the 10 kept and the new one", got)
	}
	clear(held)
	r.requeue(kept)
	r.raise("later", watermark{own: window * 8}, window, count)
	if got := r.keys(); got != 1 {
		t.Fatalf("%d keys remembered after the requeue and the window, want 1", got)
	}
}
