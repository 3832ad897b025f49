package holdfast

import (
	"context"
	"encoding/json"
	"fmt"
)

// Codec turns values of type T into bytes and back. Decode must not keep b:
// it is shared with the cache.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// jsonCodec is the Codec that uses encoding/json: the default, and the
// right one for a service that writes cached JSON out unchanged.
type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(v T) ([]byte, error) { return json.Marshal(v) }

func (jsonCodec[T]) Decode(b []byte) (T, error) {
	var v T
	err := json.Unmarshal(b, &v)
	return v, err
}

// Typed is a Namespace of values of type T: it encodes what the loader
// returns and decodes what the tiers hold, so callers work with T.
type Typed[T any] struct {
	ns    *Namespace
	codec Codec[T]
}

// NewTyped returns a typed view of ns. A nil codec means encoding/json's
// Marshal and Unmarshal.
func NewTyped[T any](ns *Namespace, codec Codec[T]) *Typed[T] {
	if codec == nil {
		codec = jsonCodec[T]{}
	}
	return &Typed[T]{ns: ns, codec: codec}
}

// Namespace returns the underlying byte namespace.
func (t *Typed[T]) Namespace() *Namespace { return t.ns }

// Get is Namespace.Get for values of type T. Bytes that do not decode are
// an error, not a panic; the caller should invalidate the key.
func (t *Typed[T]) Get(ctx context.Context, key string, load func(ctx context.Context, key string) (T, error)) (T, Result, error) {
	res, err := t.ns.Get(ctx, key, func(ctx context.Context, key string) ([]byte, error) {
		v, err := load(ctx, key)
		if err != nil {
			return nil, err
		}
		b, err := t.codec.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("holdfast: encode %s value: %w", t.ns.name, err)
		}
		return b, nil
	})
	var zero T
	if err != nil {
		return zero, res, err
	}
	v, err := t.codec.Decode(res.Value)
	if err != nil {
		return zero, res, fmt.Errorf("holdfast: decode %s value of %q: %w", t.ns.name, key, err)
	}
	return v, res, nil
}

// GetMany is Namespace.GetMany for values of type T: one value, Result and
// error per key, in the order of keys (errs is nil when every key
// succeeded). load returns the values it found; keys it leaves out are not
// found.
func (t *Typed[T]) GetMany(ctx context.Context, keys []string, load func(ctx context.Context, keys []string) (map[string]T, error)) (vals []T, results []Result, errs []error) {
	results, errs = t.ns.GetMany(ctx, keys, func(ctx context.Context, keys []string) (map[string][]byte, error) {
		found, err := load(ctx, keys)
		if err != nil {
			return nil, err
		}
		out := make(map[string][]byte, len(found))
		for k, v := range found {
			b, err := t.codec.Encode(v)
			if err != nil {
				return nil, fmt.Errorf("holdfast: encode %s value of %q: %w", t.ns.name, k, err)
			}
			out[k] = b
		}
		return out, nil
	})
	vals = make([]T, len(keys))
	for i, res := range results {
		if errs != nil && errs[i] != nil {
			continue
		}
		v, err := t.codec.Decode(res.Value)
		if err != nil {
			if errs == nil {
				errs = make([]error, len(keys))
			}
			errs[i] = fmt.Errorf("holdfast: decode %s value of %q: %w", t.ns.name, keys[i], err)
			continue
		}
		vals[i] = v
	}
	return vals, results, errs
}

// Invalidate is Namespace.Invalidate.
func (t *Typed[T]) Invalidate(ctx context.Context, keys ...string) error {
	return t.ns.Invalidate(ctx, keys...)
}
