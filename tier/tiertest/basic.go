package tiertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// oddKeys are keys as the Cache may qualify them ("<namespace>:<key>", the
// key being any string the application reads): spaces, non-ASCII and
// non-UTF-8 bytes, a NUL, braces (hash tags in a Redis Cluster, whole or
// broken) and a key of the Cache's default largest length.
var oddKeys = []string{
	"ns:plain",
	"ns:with space",
	"ns:ünïcødé",
	"ns:\xff\xfe not UTF-8",
	"ns:nul\x00byte",
	"ns:{tag}",
	"ns:{tag}rest",
	"ns:open{brace",
	"ns:close}brace",
	"ns:{}empty",
	"ns:" + strings.Repeat("k", 512),
}

// entries are envelopes the Cache writes: a value with and without a stale
// time of its own (version 2 and 1), a negative entry, an empty value and
// a value of every byte.
func entries() map[string]tier.Entry {
	origin := time.Unix(1_700_000_000, 123_456_789)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return map[string]tier.Entry{
		"value": {Value: []byte("v1"), Origin: origin, Soft: origin.Add(time.Minute),
			Hard: origin.Add(time.Hour), LoadCost: 1500 * time.Microsecond},
		"stale": {Value: []byte("v2"), Origin: origin, Soft: origin.Add(time.Second),
			Hard: origin.Add(2 * time.Second), Stale: origin.Add(time.Hour)},
		"negative": {Origin: origin, Soft: origin.Add(time.Minute), Hard: origin.Add(time.Minute), Negative: true},
		"empty":    {Value: []byte{}, Origin: origin, Soft: origin, Hard: origin},
		"bytes":    {Value: all, Origin: origin, Soft: origin.Add(time.Minute), Hard: origin.Add(time.Hour)},
	}
}

func (s *suite) runTier(t *testing.T) {
	t.Run("GetMissing", s.getMissing)
	t.Run("SetGetEnvelope", s.setGetEnvelope)
	t.Run("OpaqueBytes", s.opaqueBytes)
	t.Run("SetMany", s.setMany)
	t.Run("Overwrite", s.overwrite)
	t.Run("CallerBuffer", s.callerBuffer)
	t.Run("OddKeys", s.oddKeys)
	t.Run("LargeValue", s.largeValue)
	t.Run("OversizedValue", s.oversizedValue)
	t.Run("GetMany", s.getMany)
	t.Run("GetManyEmpty", s.getManyEmpty)
	t.Run("Delete", s.delete)
	t.Run("SecondClient", s.secondClient)
	t.Run("TTLKept", s.ttlKept)
	t.Run("TTLExpires", s.ttlExpires)
	t.Run("DeadContext", s.deadContext)
	t.Run("Concurrent", s.concurrent)
}

// mustGet reads key and fails unless it is a hit with want.
func mustGet(t *testing.T, tr tier.Tier, key string, want []byte) {
	t.Helper()
	v, found, err := tr.Get(ctx(t), key)
	if err != nil || !found || !bytes.Equal(v, want) {
		t.Errorf("Get(%q) = %q, found %v, err %v; want %q, found", key, short(v), found, err, short(want))
	}
}

// mustMiss reads key and fails unless it is a miss: found false, no error.
func mustMiss(t *testing.T, tr tier.Tier, key string) {
	t.Helper()
	v, found, err := tr.Get(ctx(t), key)
	if err != nil || found {
		t.Errorf("Get(%q) = %q, found %v, err %v; want a miss (found false, err nil)", key, short(v), found, err)
	}
}

func mustSet(t *testing.T, tr tier.Tier, items ...tier.Item) {
	t.Helper()
	if err := tr.Set(ctx(t), items...); err != nil {
		t.Fatalf("Set: %v", err)
	}
}

// short abbreviates a value for a failure message.
func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%s… (%d bytes)", b[:40], len(b))
	}
	return string(b)
}

func item(key, value string) tier.Item {
	return tier.Item{Key: key, Value: []byte(value), TTL: time.Minute}
}

// A miss is found false with a nil error, never an error.
func (s *suite) getMissing(t *testing.T) {
	tr := s.open(t)
	mustMiss(t, tr, "ns:never-written")
}

// An envelope written comes back byte for byte, and decodes to the entry.
func (s *suite) setGetEnvelope(t *testing.T) {
	tr := s.open(t)
	for name, e := range entries() {
		key := "ns:" + name
		raw := tier.AppendEntry(nil, e)
		mustSet(t, tr, tier.Item{Key: key, Value: raw, TTL: time.Minute})
		v, found, err := tr.Get(ctx(t), key)
		if err != nil || !found {
			t.Errorf("%s: Get = found %v, err %v after Set", name, found, err)
			continue
		}
		if !bytes.Equal(v, raw) {
			t.Errorf("%s: Get returned %d bytes that differ from the %d written", name, len(v), len(raw))
			continue
		}
		got, err := tier.DecodeEntry(v)
		if err != nil {
			t.Errorf("%s: DecodeEntry of what Get returned: %v", name, err)
			continue
		}
		if !bytes.Equal(got.Value, e.Value) || !got.Origin.Equal(e.Origin) || !got.Soft.Equal(e.Soft) ||
			!got.Hard.Equal(e.Hard) || !got.Stale.Equal(e.Stale) || got.LoadCost != e.LoadCost || got.Negative != e.Negative {
			t.Errorf("%s: decoded %+v, wrote %+v", name, got, e)
		}
	}
}

// A tier holds opaque bytes: it neither decodes nor refuses what is not an
// envelope, a damaged one included (the Cache tells those apart, and counts
// them as corrupt).
func (s *suite) opaqueBytes(t *testing.T) {
	tr := s.open(t)
	damaged := tier.AppendEntry(nil, entries()["value"])
	damaged[len(damaged)-1] ^= 0xff
	truncated := tier.AppendEntry(nil, entries()["value"])[:tier.HeaderSize/2]
	values := map[string][]byte{
		"ns:damaged":   damaged,
		"ns:truncated": truncated,
		"ns:text":      []byte("not an envelope"),
		"ns:empty":     {},
		"ns:nul":       {0, 0, 0},
	}
	for key, v := range values {
		mustSet(t, tr, tier.Item{Key: key, Value: v, TTL: time.Minute})
	}
	for key, v := range values {
		mustGet(t, tr, key, v)
	}
	got, _, _ := tr.Get(ctx(t), "ns:damaged")
	if _, err := tier.DecodeEntry(got); !errors.Is(err, tier.ErrCorrupt) {
		t.Errorf("DecodeEntry of a damaged envelope read back = %v, want ErrCorrupt", err)
	}
}

// One Set writes every item it is given.
func (s *suite) setMany(t *testing.T) {
	tr := s.open(t)
	var items []tier.Item
	for i := range 32 {
		items = append(items, item(fmt.Sprintf("ns:many-%d", i), fmt.Sprintf("value-%d", i)))
	}
	mustSet(t, tr, items...)
	for _, it := range items {
		mustGet(t, tr, it.Key, it.Value)
	}
	if err := tr.Set(ctx(t)); err != nil {
		t.Errorf("Set of no items: %v", err)
	}
}

// A second Set of a key replaces its value.
func (s *suite) overwrite(t *testing.T) {
	tr := s.open(t)
	mustSet(t, tr, item("ns:k", "first"))
	mustSet(t, tr, item("ns:k", "second"))
	mustGet(t, tr, "ns:k", []byte("second"))
}

// A tier must not keep the byte slices it is given: the caller may reuse
// them once Set has returned.
func (s *suite) callerBuffer(t *testing.T) {
	tr := s.open(t)
	buf := []byte("original")
	mustSet(t, tr, tier.Item{Key: "ns:buf", Value: buf, TTL: time.Minute})
	copy(buf, "REUSED!!")
	mustGet(t, tr, "ns:buf", []byte("original"))
	if c, ok := tr.(tier.Coordinator); ok {
		buf := []byte("original")
		if ok, err := c.SetIfVersion(ctx(t), tier.Item{Key: "ns:buf2", Value: buf, TTL: time.Minute}, 0); err != nil || !ok {
			t.Fatalf("SetIfVersion = %v, %v", ok, err)
		}
		copy(buf, "REUSED!!")
		mustGet(t, tr, "ns:buf2", []byte("original"))
	}
}

// Every key the Cache may qualify is stored, read and deleted as itself.
func (s *suite) oddKeys(t *testing.T) {
	tr := s.open(t)
	for i, k := range oddKeys {
		mustSet(t, tr, item(k, fmt.Sprint("value-", i)))
	}
	for i, k := range oddKeys {
		mustGet(t, tr, k, []byte(fmt.Sprint("value-", i)))
	}
	ls, err := tr.GetMany(ctx(t), oddKeys)
	if err != nil || len(ls) != len(oddKeys) {
		t.Fatalf("GetMany of the odd keys = %d lookups, %v", len(ls), err)
	}
	for i, l := range ls {
		if want := fmt.Sprint("value-", i); l.Err != nil || !l.Found || string(l.Value) != want {
			t.Errorf("GetMany: %q = %q, found %v, err %v; want %q", oddKeys[i], short(l.Value), l.Found, l.Err, want)
		}
	}
	if err := tr.Delete(ctx(t), oddKeys...); err != nil {
		t.Fatalf("Delete of the odd keys: %v", err)
	}
	for _, k := range oddKeys {
		mustMiss(t, tr, k)
	}
}

// The largest value the Cache writes is stored whole.
func (s *suite) largeValue(t *testing.T) {
	tr := s.open(t)
	v := bytes.Repeat([]byte("0123456789abcdef"), s.cfg.MaxValueBytes/16+1)[:s.cfg.MaxValueBytes]
	mustSet(t, tr, tier.Item{Key: "ns:large", Value: v, TTL: time.Minute})
	mustGet(t, tr, "ns:large", v)
}

// A value past any bound is stored whole or refused with an error: never
// cut short, and a refused one leaves no value behind.
func (s *suite) oversizedValue(t *testing.T) {
	tr := s.open(t)
	v := bytes.Repeat([]byte{0xa5}, 4*s.cfg.MaxValueBytes+1)
	if err := tr.Set(ctx(t), tier.Item{Key: "ns:huge", Value: v, TTL: time.Minute}); err != nil {
		t.Logf("Set of %d bytes refused: %v", len(v), err)
		mustMiss(t, tr, "ns:huge")
		return
	}
	mustGet(t, tr, "ns:huge", v)
}

// GetMany answers one Lookup per key, in order, duplicates and misses
// included, each a hit or a miss without an error on a healthy tier.
func (s *suite) getMany(t *testing.T) {
	tr := s.open(t)
	var keys []string
	want := map[string]string{}
	for i := range 64 {
		k := fmt.Sprintf("ns:gm-%d", i)
		keys = append(keys, k)
		if i%3 != 0 {
			want[k] = fmt.Sprint("v", i)
			mustSet(t, tr, item(k, want[k]))
		}
	}
	keys = append(keys, keys[1], keys[0], keys[1])
	ls, err := tr.GetMany(ctx(t), keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if len(ls) != len(keys) {
		t.Fatalf("GetMany of %d keys returned %d lookups", len(keys), len(ls))
	}
	for i, l := range ls {
		w, hit := want[keys[i]]
		switch {
		case l.Err != nil:
			t.Errorf("GetMany: %q failed on its own: %v", keys[i], l.Err)
		case l.Found != hit || (hit && string(l.Value) != w):
			t.Errorf("GetMany: lookup %d (%q) = %q, found %v; want %q, found %v", i, keys[i], short(l.Value), l.Found, w, hit)
		}
	}
}

// GetMany of no keys answers no lookups.
func (s *suite) getManyEmpty(t *testing.T) {
	tr := s.open(t)
	ls, err := tr.GetMany(ctx(t), nil)
	if err != nil || len(ls) != 0 {
		t.Errorf("GetMany(nil) = %d lookups, %v; want none, no error", len(ls), err)
	}
}

// Delete removes keys; a missing key is not an error.
func (s *suite) delete(t *testing.T) {
	tr := s.open(t)
	mustSet(t, tr, item("ns:a", "a"), item("ns:b", "b"), item("ns:c", "c"))
	if err := tr.Delete(ctx(t), "ns:a", "ns:missing", "ns:b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustMiss(t, tr, "ns:a")
	mustMiss(t, tr, "ns:b")
	mustGet(t, tr, "ns:c", []byte("c"))
	if err := tr.Delete(ctx(t), "ns:missing"); err != nil {
		t.Errorf("Delete of a missing key: %v", err)
	}
	if err := tr.Delete(ctx(t)); err != nil {
		t.Errorf("Delete of no keys: %v", err)
	}
}

// Two clients share one tier: what one writes or deletes, the other sees
// (eventually: a replica may lag).
func (s *suite) secondClient(t *testing.T) {
	a, b := s.pair(t, true)
	mustSet(t, a, item("ns:shared", "from a"))
	if !eventually(func() bool {
		v, found, err := b.Get(ctx(t), "ns:shared")
		return err == nil && found && string(v) == "from a"
	}) {
		t.Fatalf("the second client did not read the first's write within %v", Patience)
	}
	if err := b.Delete(ctx(t), "ns:shared"); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool {
		_, found, err := a.Get(ctx(t), "ns:shared")
		return err == nil && !found
	}) {
		t.Fatalf("the first client still read a key the second deleted %v ago", Patience)
	}
}

// ttlSlack allows for clocks of millisecond resolution (a server's) and
// for the wall clock's small steps.
const ttlSlack = 20 * time.Millisecond

// A value is kept at least until its TTL has passed.
func (s *suite) ttlKept(t *testing.T) {
	tr := s.open(t)
	// Long enough that no read below returns after it on a machine
	// however loaded; a read that did would prove nothing, and says so.
	const ttl = 30 * time.Second
	start := time.Now()
	mustSet(t, tr, tier.Item{Key: "ns:kept", Value: []byte("v"), TTL: ttl})
	for range 5 {
		v, found, err := tr.Get(ctx(t), "ns:kept")
		if time.Since(start) >= ttl {
			t.Fatalf("reading back a value took %v, past its TTL: the check could not be made", time.Since(start))
		}
		if err != nil || !found || string(v) != "v" {
			t.Fatalf("Get %v after a Set with TTL %v = %q, %v, %v; want the value", time.Since(start), ttl, v, found, err)
		}
	}
}

// A value expires once its TTL has passed (a time to live), and not
// before.
func (s *suite) ttlExpires(t *testing.T) {
	tr := s.open(t)
	const ttl = 150 * time.Millisecond
	start := time.Now()
	mustSet(t, tr, tier.Item{Key: "ns:short", Value: []byte("v"), TTL: ttl})
	var missAt time.Duration
	if !eventually(func() bool {
		_, found, err := tr.Get(ctx(t), "ns:short")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		missAt = time.Since(start)
		return !found
	}) {
		t.Fatalf("a value with TTL %v was still there %v later", ttl, Patience)
	}
	if missAt < ttl-ttlSlack {
		t.Errorf("a value with TTL %v was gone %v after its Set began", ttl, missAt)
	}
}

// A call whose context has ended fails with the context's error, and such
// calls leave the tier working (a caller's cancellation is no failure of
// the tier's).
func (s *suite) deadContext(t *testing.T) {
	tr := s.open(t)
	mustSet(t, tr, item("ns:k", "v"))
	for name, dc := range dead(t) {
		for range 10 {
			_, found, err := tr.Get(dc, "ns:k")
			checkDead(t, "Get", name, dc, err)
			if found {
				t.Errorf("Get with a context %s reported a hit", name)
			}
			_, err = tr.GetMany(dc, []string{"ns:k", "ns:other"})
			checkDead(t, "GetMany", name, dc, err)
			checkDead(t, "Set", name, dc, tr.Set(dc, item("ns:k2", "v")))
			checkDead(t, "Delete", name, dc, tr.Delete(dc, "ns:k2"))
		}
	}
	mustGet(t, tr, "ns:k", []byte("v"))
}

// checkDead fails unless err reports dc's end.
func checkDead(t *testing.T, call, name string, dc context.Context, err error) {
	t.Helper()
	if !errors.Is(err, dc.Err()) {
		t.Errorf("%s with a context %s = %v; want an error matching %v", call, name, err, dc.Err())
	}
}

// Concurrent calls are safe (run with -race to check for data races).
func (s *suite) concurrent(t *testing.T) {
	tr := s.open(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				k := fmt.Sprintf("ns:c-%d-%d", g, i)
				if err := tr.Set(ctx(t), item(k, k)); err != nil {
					errs <- err
					return
				}
				v, found, err := tr.Get(ctx(t), k)
				if err != nil || !found || string(v) != k {
					errs <- fmt.Errorf("Get(%q) = %q, %v, %v", k, v, found, err)
					return
				}
				if _, err := tr.GetMany(ctx(t), []string{k, "ns:none"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
