package holdfast

import (
	"github.com/holdfast-dev/holdfast/tier"
)

// meta is the decoded header of an envelope kept beside the raw bytes, so the
// in-process tiers answer a hit without decoding or copying anything.
//
// It holds the answer a hit gives, Result, laid out ready to copy: its
// Value is raw's payload, its times the envelope's, NotFound set for a
// cached not-found, and in the hot tier's copy Source is SourceHot. A
// Result written field by field makes the caller's copy of it wait on
// store forwarding, about a sixth of a hot-tier hit (BenchmarkGetHit).
type meta struct {
	Result
	raw []byte // the whole envelope
	// stale is when the value may no longer be served even as the
	// fallback for a failed load, when its loader set that window itself;
	// 0 leaves it to the namespace's StaleIfError (Namespace.staleUntil).
	stale int64
	// current is when this process last found the value current: when a
	// shared-tier read that answered with it was sent; 0 for a value this
	// process loaded, current at its origin. A write-back (refill.go) and
	// a hot-tier copy's life go by it. It never leaves the process.
	current  int64
	costUsec uint32
	// ver is the low 32 bits of the key's version (Coordinator.Version)
	// plus one when this process loaded the value having read that version
	// first; 0 when it is not known (a value read from the shared tier). It
	// never leaves the process, and is only compared with a version read
	// within the value's lifetime: no key is invalidated 2^32 times in one.
	// Beside costUsec it keeps a node of the stores to 192 bytes.
	ver uint32
}

// currentAt is when the value was last found current (meta.current).
func (m *meta) currentAt() int64 { return max(m.origin, m.current) }

// decodeMeta decodes an envelope (tier.DecodeEntry) into the form the
// in-process tiers keep.
func decodeMeta(b []byte) (meta, error) {
	e, err := tier.DecodeEntry(b)
	if err != nil {
		return meta{}, err
	}
	var stale int64
	if !e.Stale.IsZero() {
		stale = e.Stale.UnixNano()
	}
	return meta{
		Result: Result{
			Value:    e.Value,
			NotFound: e.Negative,
			origin:   e.Origin.UnixNano(),
			soft:     e.Soft.UnixNano(),
			hard:     e.Hard.UnixNano(),
		},
		stale:    stale,
		raw:      b,
		costUsec: uint32(e.LoadCost.Microseconds()),
	}, nil
}
