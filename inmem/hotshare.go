package inmem

import (
	"context"
	"sort"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

var _ tier.HotSharer = (*Tier)(nil)

// maxSharedHot bounds each shared hot set, as package redis does.
const maxSharedHot = 1024

// ShareHot implements tier.HotSharer.
func (t *Tier) ShareHot(ctx context.Context, set string, keys []string, ttl time.Duration, limit int) ([]string, error) {
	if err := t.enter(ctx, &t.calls.HotShares); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.hotSets == nil {
		t.hotSets = map[string]map[string]time.Time{}
	}
	s := t.hotSets[set]
	if s == nil {
		s = map[string]time.Time{}
		t.hotSets[set] = s
	}
	for k, exp := range s {
		if !now.Before(exp) {
			delete(s, k)
		}
	}
	for _, k := range keys {
		s[k] = now.Add(ttl)
	}
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	// The most recently published first, as Redis returns them.
	sort.Slice(out, func(i, j int) bool {
		if !s[out[i]].Equal(s[out[j]]) {
			return s[out[i]].After(s[out[j]])
		}
		return out[i] > out[j]
	})
	for _, k := range out[min(len(out), maxSharedHot):] {
		delete(s, k)
	}
	return out[:min(len(out), limit)], nil
}
