package lab

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/tier"
)

// newSharedTier builds holdfast's Redis tier over addrs. It is set by
// holdfast_redis.go once package redis exists and compiles; until then the
// holdfast mode reports the tier missing rather than run without it, which
// would measure a different system.
// Its stats function feeds the table's extra figures.
var newSharedTier func(ctx context.Context, addrs []string, dialTimeout time.Duration) (tier.Tier, func() map[string]float64, error)

// newSentinelTier is newSharedTier for the primary a Sentinel group's
// sentinels name.
var newSentinelTier func(ctx context.Context, sentinels []string, master string) (tier.Tier, func() map[string]float64, error)

// NewHoldfast builds the holdfast mode: a holdfast.Cache with one namespace
// over the Redis tier, loading from cfg.Load. Its settings are the library's
// defaults except those the scenario fixes: the TTLs, stale-if-error, and a
// load limit equal to the source's cap.
func NewHoldfast(ctx context.Context, cfg ReaderConfig) (Reader, error) {
	if newSharedTier == nil {
		return nil, &MissingError{Part: "holdfast Redis tier (package redis does not build yet)"}
	}
	var (
		tier      tier.Tier
		tierStats func() map[string]float64
		err       error
	)
	switch {
	case len(cfg.SentinelAddrs) > 0:
		tier, tierStats, err = newSentinelTier(ctx, cfg.SentinelAddrs, cfg.SentinelMaster)
	case len(cfg.RedisAddrs) == 0:
		return nil, errors.New("holdfast mode needs a Redis address")
	default:
		tier, tierStats, err = newSharedTier(ctx, cfg.RedisAddrs, cfg.DialTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("holdfast: redis tier: %w", err)
	}
	r, err := newHoldfastReader(cfg, tier)
	if err != nil {
		tier.Close()
		return nil, err
	}
	r.tierStats = tierStats
	return r, nil
}

// holdfastReader adapts a holdfast.Namespace to Reader.
type holdfastReader struct {
	c    *holdfast.Cache
	ns   *holdfast.Namespace
	tier tier.Tier // owned: the Cache does not close its shared tier
	load holdfast.Loader

	tierStats func() map[string]float64 // nil when the tier has none
}

var (
	_ Reader       = (*holdfastReader)(nil)
	_ tieredReader = (*holdfastReader)(nil)
)

func newHoldfastReader(cfg ReaderConfig, tier tier.Tier) (*holdfastReader, error) {
	limit := cfg.LoadCap
	if limit <= 0 {
		limit = 1000 // an uncapped source: the limiter must not be what is measured
	}
	c, err := holdfast.New(holdfast.Options{
		Shared: tier,
		// The lab's loader cap, mirrored: holdfast rejects (or serves
		// stale) instead of sending a load the source would refuse.
		MaxConcurrentLoads: limit,
	})
	if err != nil {
		return nil, err
	}
	soft := cfg.SoftTTL
	if soft <= 0 {
		soft = time.Duration(float64(cfg.TTL) * 0.8)
	}
	hot := holdfast.HotPolicy{Threshold: cfg.HotThreshold, Share: cfg.HotShare, NoWarmStart: cfg.NoWarmStart}
	if cfg.HotDisabled {
		hot.MaxBytes = -1
	}
	ns, err := c.Namespace("lab", holdfast.Policy{
		TTL:                cfg.TTL,
		SoftTTL:            soft,
		StaleIfError:       cfg.StaleIfError,
		LastKnownGoodBytes: cfg.LastKnownGoodBytes,
		Lease:              holdfast.LeasePolicy{Enabled: cfg.Leases},
		Hot:                hot,
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &holdfastReader{c: c, ns: ns, tier: tier, load: cfg.Load}, nil
}

// Get reads through the namespace. A read refused by holdfast's limiter
// with nothing stale to serve is counted as rejected, like the source's own
// refusals.
func (h *holdfastReader) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, _, stale, err := h.GetTiered(ctx, key)
	return v, stale, err
}

// GetTiered is Get, also saying whether the hot tier answered.
func (h *holdfastReader) GetTiered(ctx context.Context, key string) ([]byte, bool, bool, error) {
	res, err := h.ns.Get(ctx, key, h.load)
	if errors.Is(err, holdfast.ErrOverloaded) {
		err = fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if err != nil {
		return nil, false, false, err
	}
	return res.Value, res.Source == holdfast.SourceHot, res.Stale(), nil
}

// Invalidate drops key from every tier; holdfast discards loads of key that
// began before it.
func (h *holdfastReader) Invalidate(ctx context.Context, key string) error {
	return h.ns.Invalidate(ctx, key)
}

// Stats returns the namespace's counters, each measure of holdfast.Stats
// under its name with "_" for "." prefixed with hf_, and the tier's.
func (h *holdfastReader) Stats() map[string]float64 {
	out := map[string]float64{}
	for m, v := range h.ns.Stats().All() {
		out["hf_"+strings.ReplaceAll(m.Name, ".", "_")] = float64(v)
	}
	if h.tierStats != nil {
		for k, v := range h.tierStats() {
			out[k] = v
		}
	}
	return out
}

// structStats turns a struct of counters into named figures by reflection,
// so new counters in holdfast show up in the table without a change here.
func structStats(prefix string, s any) map[string]float64 {
	out := map[string]float64{}
	v := reflect.ValueOf(s)
	if v.Kind() != reflect.Struct {
		return out
	}
	for i := range v.NumField() {
		f := v.Field(i)
		name := prefix + snake(v.Type().Field(i).Name)
		switch {
		case !v.Type().Field(i).IsExported():
		case f.CanUint():
			out[name] = float64(f.Uint())
		case f.CanInt():
			out[name] = float64(f.Int())
		case f.CanFloat():
			out[name] = f.Float()
		}
	}
	return out
}

func (h *holdfastReader) Close() error {
	return errors.Join(h.c.Close(), h.tier.Close())
}

// snake turns a Go field name (SharedSetErrors) into shared_set_errors.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
