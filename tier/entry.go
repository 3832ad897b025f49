package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
)

// Entry is a cached value with the times that govern it. Every tier stores
// entries in one binary envelope (see AppendEntry), so a value keeps its
// origin time as it moves between the shared tier, the hot tier and the
// last-known-good store.
type Entry struct {
	// Value is the payload. For a negative entry it is empty.
	Value []byte
	// Origin is when the value was read from the source (the loader). It is
	// never reset when the value is copied between tiers: staleness is
	// counted from it (a value read from Redis can
	// already be seconds old).
	Origin time.Time
	// Soft is when the value stops being fresh: after it a read returns the
	// value at once and refreshes it in the background.
	Soft time.Time
	// Hard is when the value may no longer be served as current. Past it a
	// read loads synchronously; only the stale-if-error window still allows
	// the value, and only when loading fails.
	Hard time.Time
	// Stale, when not the zero Time, is when the value may no longer be
	// served even as the fallback for a failed load: its own stale-if-error
	// window, which its loader set. The zero Time leaves that to the policy
	// of the namespace that reads it (Hard plus Policy.StaleIfError).
	Stale time.Time
	// LoadCost is how long the load that produced the value took; XFetch
	// uses it to spread early refreshes.
	LoadCost time.Duration
	// Negative marks a cached "not found" answer.
	Negative bool
}

// HeaderSize is the most bytes the envelope adds to a value: a tier that
// bounds what it stores (redis.Options.MaxValueBytes) bounds the value plus
// this.
const HeaderSize = headerV2

// ErrCorrupt is returned by DecodeEntry for bytes that are not a valid
// envelope. The Cache's read path takes such bytes for a miss and counts
// them.
var ErrCorrupt = errors.New("holdfast: corrupt entry")

// The envelope, all integers big-endian. Version 1:
//
//	offset size field
//	0      2    magic "hf"
//	2      1    version (1)
//	3      1    flags (bit 0: negative; other bits must be zero)
//	4      8    origin, Unix nanoseconds
//	12     8    soft, Unix nanoseconds
//	20     8    hard, Unix nanoseconds
//	28     4    load cost, microseconds
//	32     4    payload length
//	36     4    CRC-32C of bytes 0..35 and the payload
//	40     n    payload
//
// Version 2 inserts the stale time (Entry.Stale, Unix nanoseconds, not
// before hard) at offset 28, moving load cost, payload length and checksum
// 8 bytes on (the checksum covers bytes 0..43); the payload starts at 48.
// An entry is written as version 2 only when it carries a stale time of its
// own, so a process of a release that reads only version 1 takes just those
// entries for misses, never the rest, while a fleet is being upgraded.
//
// The checksum catches truncation and foreign or damaged bytes in a shared
// tier that other programs can write to; a value that fails any check is a
// miss, never a panic.
const (
	envelopeMagic0 = 'h'
	envelopeMagic1 = 'f'
	headerV1       = 40
	headerV2       = 48
	flagNegative   = 1 << 0
	knownFlags     = flagNegative
)

// EncodedSize is the length of e's envelope: its payload plus a header of
// 40 bytes, or HeaderSize when it carries a stale time.
func EncodedSize(e Entry) int {
	if e.Stale.IsZero() {
		return headerV1 + len(e.Value)
	}
	return headerV2 + len(e.Value)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendEntry appends the envelope encoding of e to dst and returns the
// extended slice.
func AppendEntry(dst []byte, e Entry) []byte {
	var flags byte
	if e.Negative {
		flags |= flagNegative
	}
	cost := e.LoadCost.Microseconds()
	if cost < 0 {
		cost = 0
	} else if cost > 1<<32-1 {
		cost = 1<<32 - 1
	}
	version, header := byte(1), headerV1
	if !e.Stale.IsZero() {
		version, header = 2, headerV2
	}
	start := len(dst)
	dst = append(dst, envelopeMagic0, envelopeMagic1, version, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Origin.UnixNano()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Soft.UnixNano()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Hard.UnixNano()))
	if version == 2 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.Stale.UnixNano()))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(cost))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Value)))
	dst = append(dst, 0, 0, 0, 0)
	dst = append(dst, e.Value...)
	binary.BigEndian.PutUint32(dst[start+header-4:], crcOf(dst[start:], header))
	return dst
}

// crcOf is the checksum of an envelope whose header is header bytes long:
// the header up to the checksum, and the payload.
func crcOf(b []byte, header int) uint32 {
	sum := crc32.Update(0, castagnoli, b[:header-4])
	return crc32.Update(sum, castagnoli, b[header:])
}

// DecodeEntry decodes an envelope. The returned Entry's Value aliases b.
// Any malformed input, whatever its bytes, yields an error matching
// ErrCorrupt; DecodeEntry never panics.
func DecodeEntry(b []byte) (Entry, error) { return decode(b) }

func decode(b []byte) (Entry, error) {
	if len(b) < headerV1 {
		return Entry{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), headerV1)
	}
	if b[0] != envelopeMagic0 || b[1] != envelopeMagic1 {
		return Entry{}, fmt.Errorf("%w: bad magic %#x %#x", ErrCorrupt, b[0], b[1])
	}
	var header int
	switch b[2] {
	case 1:
		header = headerV1
	case 2:
		header = headerV2
		if len(b) < header {
			return Entry{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), header)
		}
	default:
		return Entry{}, fmt.Errorf("%w: unknown version %d", ErrCorrupt, b[2])
	}
	flags := b[3]
	if flags&^knownFlags != 0 {
		return Entry{}, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, flags)
	}
	tail := b[header-12 : header] // load cost, payload length, checksum
	n := binary.BigEndian.Uint32(tail[4:8])
	if uint64(n) != uint64(len(b)-header) {
		return Entry{}, fmt.Errorf("%w: payload length %d, have %d bytes", ErrCorrupt, n, len(b)-header)
	}
	if crcOf(b, header) != binary.BigEndian.Uint32(tail[8:12]) {
		return Entry{}, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	origin := int64(binary.BigEndian.Uint64(b[4:12]))
	soft := int64(binary.BigEndian.Uint64(b[12:20]))
	hard := int64(binary.BigEndian.Uint64(b[20:28]))
	negative := flags&flagNegative != 0
	if soft > hard || origin > soft {
		return Entry{}, fmt.Errorf("%w: times out of order (origin %d, soft %d, hard %d)", ErrCorrupt, origin, soft, hard)
	}
	if negative && n != 0 {
		return Entry{}, fmt.Errorf("%w: negative entry with a %d-byte payload", ErrCorrupt, n)
	}
	e := Entry{
		Value:    b[header:],
		Origin:   time.Unix(0, origin),
		Soft:     time.Unix(0, soft),
		Hard:     time.Unix(0, hard),
		LoadCost: time.Duration(binary.BigEndian.Uint32(tail[0:4])) * time.Microsecond,
		Negative: negative,
	}
	if header == headerV2 {
		stale := int64(binary.BigEndian.Uint64(b[28:36]))
		if stale < hard {
			return Entry{}, fmt.Errorf("%w: stale time %d before hard time %d", ErrCorrupt, stale, hard)
		}
		e.Stale = time.Unix(0, stale)
	}
	return e, nil
}
