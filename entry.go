package holdfast

import (
	"github.com/holdfast-dev/holdfast/tier"
)

// meta is the decoded header of an envelope kept beside the raw bytes, so the
// in-process tiers answer a hit without decoding or copying anything.
type meta struct {
	raw    []byte // the whole envelope
	value  []byte // raw's payload
	origin int64
	soft   int64
	hard   int64
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
	negative bool
	// ver is the key's version (Coordinator.Version) plus one when this
	// process loaded the value having read that version first; 0 when it is
	// not known (a value read from the shared tier). It never leaves the
	// process.
	ver uint64
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
		stale:    stale,
		raw:      b,
		value:    e.Value,
		origin:   e.Origin.UnixNano(),
		soft:     e.Soft.UnixNano(),
		hard:     e.Hard.UnixNano(),
		costUsec: uint32(e.LoadCost.Microseconds()),
		negative: e.Negative,
	}, nil
}
