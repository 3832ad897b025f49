package holdfast

import (
	"fmt"
	"testing"
)

// The recent-invalidations record keeps at most maxRecentInvalidations
// keys, forgets the oldest first, and forgets entries past the window.
func TestRecentInvalidationsBounded(t *testing.T) {
	var r recentInvalidations
	const window = int64(1 << 62) // nothing ages out
	total := 2*maxRecentInvalidations + 17
	for i := range total {
		r.add(fmt.Sprint("k", i), int64(i+1), window)
	}
	if got := r.n.Load(); got != maxRecentInvalidations {
		t.Fatalf("%d keys remembered, want %d", got, maxRecentInvalidations)
	}
	if live := len(r.queue) - r.head; live != maxRecentInvalidations {
		t.Fatalf("%d live queue entries, want %d", live, maxRecentInvalidations)
	}
	if len(r.queue) > 2*maxRecentInvalidations+1 {
		t.Fatalf("queue of %d entries for %d remembered: forgotten ones are never cut off", len(r.queue), maxRecentInvalidations)
	}
	now := int64(total + 1)
	oldest, newest := fmt.Sprint("k", total-maxRecentInvalidations-1), fmt.Sprint("k", total-1)
	if r.supersedes(oldest, 0, now, window) {
		t.Errorf("%s, past the bound, is still remembered", oldest)
	}
	if !r.supersedes(newest, 0, now, window) {
		t.Errorf("%s, the newest, is forgotten", newest)
	}

	// A short window forgets everything older than it on the next add.
	r.add("late", now+1000, 10)
	if got := r.n.Load(); got != 1 {
		t.Fatalf("%d keys remembered after the window passed, want 1", got)
	}
}
