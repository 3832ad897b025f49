package inmem

import (
	"context"
	"math/rand/v2"
	"strconv"

	"github.com/holdfast-dev/holdfast/tier"
)

// Smearing is a Tier that keeps copies of hot keys (a tier.Smearer), for
// tests of the read path's smearing: key K's copies are "K#1" … "K#n-1"
// beside K itself. Every copy lives in the one map, so this says nothing
// about spreading load; package redis places copies on distinct Cluster
// primaries.
type Smearing struct {
	*Tier
	copies int
}

var _ tier.Smearer = (*Smearing)(nil)

// Smearing returns t as a Smearer keeping copies copies of each hot key,
// the key itself included.
func (t *Tier) Smearing(copies int) *Smearing { return &Smearing{Tier: t, copies: max(1, copies)} }

// Copies implements tier.Smearer.
func (s *Smearing) Copies() int { return s.copies }

// CopyKey returns the key under which copy i (1 ≤ i < copies) of key lives.
func CopyKey(key string, i int) string { return key + "#" + strconv.Itoa(i) }

// GetSmeared implements tier.Smearer.
func (s *Smearing) GetSmeared(ctx context.Context, key string) ([]byte, bool, error) {
	if err := s.enter(ctx, &s.calls.SmearedGets); err != nil {
		return nil, false, err
	}
	if i := rand.IntN(s.copies); i > 0 {
		if v, ok := s.Raw(CopyKey(key, i)); ok {
			return v, true, nil
		}
	}
	v, ok := s.Raw(key)
	return v, ok, nil
}

// SetSmearedIfVersion implements tier.Smearer: one version guards the
// key and its copies, all written under one lock.
func (s *Smearing) SetSmearedIfVersion(ctx context.Context, it tier.Item, version uint64) (bool, error) {
	if err := s.enter(ctx, &s.calls.SmearedSets); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.versions[it.Key] != version {
		return false, nil
	}
	v := item{append([]byte(nil), it.Value...), s.now().Add(it.TTL)}
	s.items[it.Key] = v
	for i := 1; i < s.copies; i++ {
		s.items[CopyKey(it.Key, i)] = v
	}
	return true, nil
}

// Invalidate implements tier.Coordinator, removing every copy of every
// key, hot or not.
func (s *Smearing) Invalidate(ctx context.Context, keys ...string) error {
	if err := s.Tier.Invalidate(ctx, keys...); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		for i := 1; i < s.copies; i++ {
			delete(s.items, CopyKey(k, i))
		}
	}
	return nil
}
