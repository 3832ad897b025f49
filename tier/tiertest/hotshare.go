package tiertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runHotSharer(t *testing.T) {
	t.Run("PublishAndRead", s.shareHotPublish)
	t.Run("MostRecentFirst", s.shareHotOrder)
	t.Run("Limit", s.shareHotLimit)
	t.Run("SetsApart", s.shareHotSets)
	t.Run("Expires", s.shareHotExpires)
	t.Run("DeadContext", s.shareHotDeadContext)
}

func (s *suite) sharers(t *testing.T) (a, b tier.HotSharer) {
	t.Helper()
	return clients[tier.HotSharer](t, s, true)
}

func share(t *testing.T, h tier.HotSharer, set string, keys []string, ttl time.Duration, limit int) []string {
	t.Helper()
	got, err := h.ShareHot(ctx(t), set, keys, ttl, limit)
	if err != nil {
		t.Fatalf("ShareHot(%q, %q): %v", set, keys, err)
	}
	if len(got) > limit {
		t.Errorf("ShareHot(%q, limit %d) returned %d keys", set, limit, len(got))
	}
	return got
}

// What one process publishes, every process reads back, its own included.
func (s *suite) shareHotPublish(t *testing.T) {
	a, b := s.sharers(t)
	got := share(t, a, "ns", []string{"k1", "k2"}, time.Minute, 10)
	if !sameSet(got, "k1", "k2") {
		t.Errorf("ShareHot returned %q to its publisher; want k1 and k2", got)
	}
	got = share(t, b, "ns", []string{"k3"}, time.Minute, 10)
	if !sameSet(got, "k1", "k2", "k3") {
		t.Errorf("ShareHot returned %q to another process; want k1, k2 and k3", got)
	}
}

func sameSet(got []string, want ...string) bool {
	got, want = slices.Clone(got), slices.Clone(want)
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// The keys come back the most recently published first. (Every call here
// has one ttl, as the Cache's calls for a set do.)
func (s *suite) shareHotOrder(t *testing.T) {
	a, b := s.sharers(t)
	share(t, a, "ns", []string{"old"}, time.Minute, 10)
	// The clocks that order the keys may count whole milliseconds.
	time.Sleep(5 * time.Millisecond)
	share(t, b, "ns", []string{"middle"}, time.Minute, 10)
	time.Sleep(5 * time.Millisecond)
	got := share(t, a, "ns", []string{"new"}, time.Minute, 10)
	if !slices.Equal(got, []string{"new", "middle", "old"}) {
		t.Errorf("ShareHot = %q; want the most recently published first: new, middle, old", got)
	}
	// Publishing a key again makes it recent again.
	time.Sleep(5 * time.Millisecond)
	got = share(t, b, "ns", []string{"old"}, time.Minute, 10)
	if !slices.Equal(got, []string{"old", "new", "middle"}) {
		t.Errorf("ShareHot after old was published again = %q; want old, new, middle", got)
	}
}

// At most limit keys come back, the most recent ones.
func (s *suite) shareHotLimit(t *testing.T) {
	a, _ := s.sharers(t)
	var first []string
	for i := range 10 {
		first = append(first, fmt.Sprint("early-", i))
	}
	share(t, a, "ns", first, time.Minute, 20)
	time.Sleep(5 * time.Millisecond)
	got := share(t, a, "ns", []string{"late-1", "late-2"}, time.Minute, 3)
	if len(got) != 3 || !sameSet(got[:2], "late-1", "late-2") {
		t.Errorf("ShareHot with limit 3 = %q; want late-1 and late-2 and one early key", got)
	}
}

// Each set is its own.
func (s *suite) shareHotSets(t *testing.T) {
	a, b := s.sharers(t)
	share(t, a, "one", []string{"in-one"}, time.Minute, 10)
	if got := share(t, b, "two", []string{"in-two"}, time.Minute, 10); !sameSet(got, "in-two") {
		t.Errorf("ShareHot of set two = %q; want only in-two", got)
	}
	if got := share(t, b, "one", nil, time.Minute, 10); !sameSet(got, "in-one") {
		t.Errorf("ShareHot of set one = %q; want only in-one", got)
	}
}

// A published key stops being current after its ttl, and not before.
func (s *suite) shareHotExpires(t *testing.T) {
	a, b := s.sharers(t)
	const ttl = 150 * time.Millisecond
	start := time.Now()
	share(t, a, "ns", []string{"brief"}, ttl, 10)
	var goneAt time.Duration
	if !eventually(func() bool {
		got := share(t, b, "ns", nil, ttl, 10)
		goneAt = time.Since(start)
		return !slices.Contains(got, "brief")
	}) {
		t.Fatalf("a key published for %v was still current %v later", ttl, Patience)
	}
	if goneAt < ttl-ttlSlack {
		t.Errorf("a key published for %v was gone %v after it was published", ttl, goneAt)
	}
}

func (s *suite) shareHotDeadContext(t *testing.T) {
	a, _ := s.sharers(t)
	for name, dc := range dead(t) {
		_, err := a.ShareHot(dc, "ns", []string{"k"}, time.Minute, 10)
		checkDead(t, "ShareHot", name, dc, err)
	}
}
