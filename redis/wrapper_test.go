package redis

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/internal/redistest"
	"github.com/holdfast-dev/holdfast/tier"
)

// tracingTier is what a user writes to trace the shared tier's calls: it
// implements tier.Tier only, counting the calls it sees. With unwrap
// set it also has Unwrap, the documented way to pass the wrapped tier's
// capabilities through.
type tracingTier struct {
	tier.Tier
	calls atomic.Int64
}

func (w *tracingTier) Get(ctx context.Context, key string) ([]byte, bool, error) {
	w.calls.Add(1)
	return w.Tier.Get(ctx, key)
}

type unwrappingTier struct{ *tracingTier }

func (w unwrappingTier) Unwrap() tier.Tier { return w.tracingTier.Tier }

// A wrapper that passes capabilities through with Unwrap keeps the
// stale-set guarantee: the same randomized races, through the wrapper.
func TestStaleSetRaceThroughAWrapper(t *testing.T) {
	var w *tracingTier
	staleSetRace(t, func(inner tier.Tier) tier.Tier {
		w = &tracingTier{Tier: inner}
		return unwrappingTier{w}
	})
	if w.calls.Load() == 0 {
		t.Fatal("the wrapper saw no read: the cache went around it")
	}
}

// A wrapper that hides the capabilities is refused for a policy that needs
// them, with an error that says what is missing, instead of losing the
// guarantee silently.
func TestWrapperHidingCapabilitiesIsAnError(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Addrs: []string{srv.Addr()}})
	c, err := holdfast.New(holdfast.Options{Shared: &tracingTier{Tier: tr}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Namespace("leased", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
	if err == nil || !strings.Contains(err.Error(), "Coordinator") {
		t.Fatalf("leases over a tier that hides them: err = %v, want one naming Coordinator", err)
	}
	if _, err := c.Namespace("plain", holdfast.Policy{}); err == nil {
		t.Fatal("a tier without versions was accepted without UnguardedWrites")
	}
	if _, err := c.Namespace("unguarded", holdfast.Policy{UnguardedWrites: true}); err != nil {
		t.Fatalf("UnguardedWrites: %v", err)
	}
	c2, err := holdfast.New(holdfast.Options{Shared: unwrappingTier{&tracingTier{Tier: tr}}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	through, err := c2.Namespace("through", holdfast.Policy{Lease: holdfast.LeasePolicy{Enabled: true}})
	if err != nil {
		t.Fatalf("leases through Unwrap: %v", err)
	}
	if st := through.Stats(); st.Get("capability.versions") != 1 || st.Get("capability.leases") != 1 {
		t.Fatalf("capabilities through Unwrap: versions %d, leases %d; want 1, 1", st.Get("capability.versions"), st.Get("capability.leases"))
	}
}
