package tiertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runCoordinator(t *testing.T) {
	t.Run("VersionInitial", s.versionInitial)
	t.Run("InvalidateBumps", s.invalidateBumps)
	t.Run("SetIfVersionCurrent", s.setIfVersionCurrent)
	t.Run("SetIfVersionStale", s.setIfVersionStale)
	t.Run("StaleSetAcrossClients", s.staleSetAcrossClients)
	t.Run("OddKeys", s.coordOddKeys)
	t.Run("Lease", s.lease)
	t.Run("LeaseAcrossClients", s.leaseAcrossClients)
	t.Run("LeaseExpires", s.leaseExpires)
	t.Run("LeaseBesideValue", s.leaseBesideValue)
	t.Run("DeadContext", s.coordDeadContext)
}

func (s *suite) coord(t *testing.T, peer bool) (a, b tier.Coordinator) {
	t.Helper()
	return clients[tier.Coordinator](t, s, peer)
}

func mustVersion(t *testing.T, c tier.Coordinator, key string, want uint64) {
	t.Helper()
	v, err := c.Version(ctx(t), key)
	if err != nil || v != want {
		t.Errorf("Version(%q) = %d, %v; want %d", key, v, err, want)
	}
}

func mustInvalidate(t *testing.T, c tier.Coordinator, keys ...string) {
	t.Helper()
	if err := c.Invalidate(ctx(t), keys...); err != nil {
		t.Fatalf("Invalidate: %v", err)
	}
}

// A key's version is 0 until it is first invalidated.
func (s *suite) versionInitial(t *testing.T) {
	c, _ := s.coord(t, false)
	mustVersion(t, c, "ns:never", 0)
	mustSet(t, c, item("ns:written", "v"))
	mustVersion(t, c, "ns:written", 0)
}

// Invalidate deletes each key and bumps its version by one, whether or not
// the key had a value.
func (s *suite) invalidateBumps(t *testing.T) {
	c, _ := s.coord(t, false)
	mustSet(t, c, item("ns:a", "a"), item("ns:b", "b"))
	mustInvalidate(t, c, "ns:a", "ns:b", "ns:never")
	mustMiss(t, c, "ns:a")
	mustMiss(t, c, "ns:b")
	mustVersion(t, c, "ns:a", 1)
	mustVersion(t, c, "ns:b", 1)
	mustVersion(t, c, "ns:never", 1)
	mustInvalidate(t, c, "ns:a")
	mustVersion(t, c, "ns:a", 2)
	mustVersion(t, c, "ns:b", 1)
	if err := c.Invalidate(ctx(t)); err != nil {
		t.Errorf("Invalidate of no keys: %v", err)
	}
}

// SetIfVersion with the key's version writes, and says so.
func (s *suite) setIfVersionCurrent(t *testing.T) {
	c, _ := s.coord(t, false)
	for _, v := range []uint64{0, 1} {
		key := fmt.Sprint("ns:cur-", v)
		for range v {
			mustInvalidate(t, c, key)
		}
		ok, err := c.SetIfVersion(ctx(t), item(key, "value"), v)
		if err != nil || !ok {
			t.Errorf("SetIfVersion(%q, version %d) with that version current = %v, %v; want written", key, v, ok, err)
		}
		mustGet(t, c, key, []byte("value"))
	}
}

// SetIfVersion with a version an invalidation has passed writes nothing,
// and says so: the stale set.
func (s *suite) setIfVersionStale(t *testing.T) {
	c, _ := s.coord(t, false)
	v, err := c.Version(ctx(t), "ns:k")
	if err != nil {
		t.Fatal(err)
	}
	mustInvalidate(t, c, "ns:k")
	ok, err := c.SetIfVersion(ctx(t), item("ns:k", "read before the invalidation"), v)
	if err != nil || ok {
		t.Errorf("SetIfVersion with the version from before an invalidation = %v, %v; want refused", ok, err)
	}
	mustMiss(t, c, "ns:k")
	// A version from the future is not current either.
	ok, err = c.SetIfVersion(ctx(t), item("ns:k", "v"), v+5)
	if err != nil || ok {
		t.Errorf("SetIfVersion with a version the key never had = %v, %v; want refused", ok, err)
	}
}

// The guard holds between processes: an invalidation by one refuses the
// write another prepared before it.
func (s *suite) staleSetAcrossClients(t *testing.T) {
	a, b := s.coord(t, true)
	mustSet(t, a, item("ns:k", "old"))
	v, err := a.Version(ctx(t), "ns:k")
	if err != nil {
		t.Fatal(err)
	}
	mustInvalidate(t, b, "ns:k")
	mustVersion(t, a, "ns:k", v+1)
	ok, err := a.SetIfVersion(ctx(t), item("ns:k", "read before the invalidation"), v)
	if err != nil || ok {
		t.Errorf("SetIfVersion after another client's Invalidate = %v, %v; want refused", ok, err)
	}
	mustMiss(t, a, "ns:k")
	if !eventually(func() bool {
		_, found, err := b.Get(ctx(t), "ns:k")
		return err == nil && !found
	}) {
		t.Errorf("the invalidating client still read the key %v later", Patience)
	}
}

// Versions and leases work for every key the Cache may qualify, but for
// the keys a declared deviation refuses, whose calls must all fail.
func (s *suite) coordOddKeys(t *testing.T) {
	c, _ := s.coord(t, false)
	for _, k := range oddKeys {
		if s.cfg.CoordinatorRefuses != nil && s.cfg.CoordinatorRefuses(k) {
			t.Logf("deviation from the contract: key %q is refused: %s", k, s.cfg.CoordinatorRefusesWhy)
			refused(t, c, k)
			continue
		}
		if err := c.Invalidate(ctx(t), k); err != nil {
			t.Errorf("Invalidate(%q): %v", k, err)
			continue
		}
		mustVersion(t, c, k, 1)
		if ok, err := c.SetIfVersion(ctx(t), item(k, "v"), 1); err != nil || !ok {
			t.Errorf("SetIfVersion(%q, 1) = %v, %v; want written", k, ok, err)
		}
		if ok, err := c.Lease(ctx(t), k, "token", time.Minute); err != nil || !ok {
			t.Errorf("Lease(%q) = %v, %v; want taken", k, ok, err)
		}
		if err := c.Release(ctx(t), k, "token"); err != nil {
			t.Errorf("Release(%q): %v", k, err)
		}
	}
}

func mustLease(t *testing.T, c tier.Coordinator, key, token string, want bool) {
	t.Helper()
	ok, err := c.Lease(ctx(t), key, token, time.Minute)
	if err != nil || ok != want {
		t.Errorf("Lease(%q, %q) = %v, %v; want %v", key, token, ok, err, want)
	}
}

func mustRelease(t *testing.T, c tier.Coordinator, key, token string) {
	t.Helper()
	if err := c.Release(ctx(t), key, token); err != nil {
		t.Errorf("Release(%q, %q): %v", key, token, err)
	}
}

// A lease is taken by one token at a time, per key; Release gives it up
// only for the token that holds it, and releasing a lease nobody holds is
// not an error.
func (s *suite) lease(t *testing.T) {
	c, _ := s.coord(t, false)
	mustRelease(t, c, "ns:k", "nobody")
	mustLease(t, c, "ns:k", "one", true)
	mustLease(t, c, "ns:k", "two", false)
	mustLease(t, c, "ns:other", "two", true)
	mustRelease(t, c, "ns:k", "two")
	mustLease(t, c, "ns:k", "three", false)
	mustRelease(t, c, "ns:k", "one")
	mustLease(t, c, "ns:k", "three", true)
	mustLease(t, c, "ns:other", "four", false)
}

// A lease one client holds, another is refused, until it is released.
func (s *suite) leaseAcrossClients(t *testing.T) {
	a, b := s.coord(t, true)
	mustLease(t, a, "ns:k", "a", true)
	mustLease(t, b, "ns:k", "b", false)
	mustRelease(t, b, "ns:k", "b")
	mustLease(t, b, "ns:k", "b", false)
	mustRelease(t, a, "ns:k", "a")
	mustLease(t, b, "ns:k", "b", true)
	mustLease(t, a, "ns:k", "a", false)
}

// A lease expires by itself after its TTL, and not before.
func (s *suite) leaseExpires(t *testing.T) {
	c, _ := s.coord(t, false)
	const ttl = 200 * time.Millisecond
	start := time.Now()
	if ok, err := c.Lease(ctx(t), "ns:k", "holder", ttl); err != nil || !ok {
		t.Fatalf("Lease = %v, %v", ok, err)
	}
	var takenAt time.Duration
	if !eventually(func() bool {
		ok, err := c.Lease(ctx(t), "ns:k", "next", time.Minute)
		if err != nil {
			t.Fatalf("Lease: %v", err)
		}
		takenAt = time.Since(start)
		return ok
	}) {
		t.Fatalf("a lease of %v was still held %v later", ttl, Patience)
	}
	if takenAt < ttl-ttlSlack {
		t.Errorf("a lease of %v was taken by another token %v after it was", ttl, takenAt)
	}
}

// A key's lease is no value of it and no invalidation: taking and
// releasing it leaves the key's value and version as they were.
func (s *suite) leaseBesideValue(t *testing.T) {
	c, _ := s.coord(t, false)
	mustSet(t, c, item("ns:k", "value"))
	mustLease(t, c, "ns:k", "token", true)
	mustGet(t, c, "ns:k", []byte("value"))
	mustVersion(t, c, "ns:k", 0)
	mustRelease(t, c, "ns:k", "token")
	mustGet(t, c, "ns:k", []byte("value"))
	mustMiss(t, c, "ns:never")
	mustLease(t, c, "ns:never", "token", true)
	mustMiss(t, c, "ns:never")
}

// The Coordinator's calls honour an ended context too.
func (s *suite) coordDeadContext(t *testing.T) {
	c, _ := s.coord(t, false)
	for name, dc := range dead(t) {
		_, err := c.Version(dc, "ns:k")
		checkDead(t, "Version", name, dc, err)
		ok, err := c.SetIfVersion(dc, item("ns:k", "v"), 0)
		checkDead(t, "SetIfVersion", name, dc, err)
		if ok {
			t.Errorf("SetIfVersion with a context %s reported a write", name)
		}
		checkDead(t, "Invalidate", name, dc, c.Invalidate(dc, "ns:k"))
		ok, err = c.Lease(dc, "ns:k", "token", time.Minute)
		checkDead(t, "Lease", name, dc, err)
		if ok {
			t.Errorf("Lease with a context %s reported the lease taken", name)
		}
		checkDead(t, "Release", name, dc, c.Release(dc, "ns:k", "token"))
	}
	// Whether a call the caller gave up on ran is not the contract's
	// business; that the tier still answers is.
	if _, err := c.Version(ctx(t), "ns:k"); err != nil {
		t.Errorf("Version after the calls with ended contexts: %v", err)
	}
	mustLease(t, c, "ns:after", "token", true)
}

// refused checks that every Coordinator call of key fails with an error.
func refused(t *testing.T, c tier.Coordinator, key string) {
	t.Helper()
	accepted := func(call string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s(%q) succeeded, yet Config.CoordinatorRefuses declares the key refused: remove the declaration if the tier now takes it", call, key)
		}
	}
	accepted("Invalidate", c.Invalidate(ctx(t), key))
	_, err := c.Version(ctx(t), key)
	accepted("Version", err)
	ok, err := c.SetIfVersion(ctx(t), item(key, "v"), 0)
	accepted("SetIfVersion", err)
	if ok {
		t.Errorf("SetIfVersion(%q) reported a write and an error", key)
	}
	ok, err = c.Lease(ctx(t), key, "token", time.Minute)
	accepted("Lease", err)
	if ok {
		t.Errorf("Lease(%q) reported the lease taken and an error", key)
	}
	accepted("Release", c.Release(ctx(t), key, "token"))
}
