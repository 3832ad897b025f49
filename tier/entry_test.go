package tier

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestEntryRoundTrip(t *testing.T) {
	origin := time.Unix(1_700_000_000, 123456789)
	for _, e := range []Entry{
		{Value: []byte(`{"id":1}`), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(5 * time.Second), LoadCost: 12 * time.Millisecond},
		{Value: []byte{}, Origin: origin, Soft: origin, Hard: origin},
		{Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(time.Second), Negative: true},
	} {
		b := AppendEntry(nil, e)
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("DecodeEntry(AppendEntry(%+v)): %v", e, err)
		}
		if !bytes.Equal(got.Value, e.Value) || !got.Origin.Equal(e.Origin) || !got.Soft.Equal(e.Soft) ||
			!got.Hard.Equal(e.Hard) || got.LoadCost != e.LoadCost || got.Negative != e.Negative {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
}

func TestDecodeEntryRejects(t *testing.T) {
	origin := time.Unix(1_700_000_000, 0)
	good := AppendEntry(nil, Entry{Value: []byte("payload"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(2 * time.Second)})
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":           nil,
		"short header":    good[:10],
		"truncated":       good[:len(good)-1],
		"extra byte":      append(append([]byte(nil), good...), 'x'),
		"bad magic":       mutate(func(b []byte) []byte { b[0] = 'x'; return b }),
		"future version":  mutate(func(b []byte) []byte { b[2] = 2; return b }),
		"unknown flag":    mutate(func(b []byte) []byte { b[3] = 0x80; return b }),
		"flipped bit":     mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
		"bad checksum":    mutate(func(b []byte) []byte { b[37] ^= 0xff; return b }),
		"plain json":      []byte(`{"id":1,"name":"not an envelope, but long enough to pass the length check"}`),
		"soft after hard": AppendEntry(nil, Entry{Value: []byte("v"), Origin: origin, Soft: origin.Add(2 * time.Second), Hard: origin.Add(time.Second)}),
		"negative with payload": func() []byte {
			b := AppendEntry(nil, Entry{Value: []byte("v"), Origin: origin, Soft: origin, Hard: origin})
			b[3] = flagNegative
			return reseal(b)
		}(),
	}
	for name, b := range cases {
		if _, err := DecodeEntry(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeEntry error = %v, want ErrCorrupt", name, err)
		}
	}
}

// reseal recomputes an envelope's checksum after a test edited its header.
func reseal(b []byte) []byte {
	sum := crcOf(b)
	b[36], b[37], b[38], b[39] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	return b
}

func FuzzDecodeEntry(f *testing.F) {
	origin := time.Unix(1_700_000_000, 0)
	f.Add(AppendEntry(nil, Entry{Value: []byte("hello"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(time.Minute)}))
	f.Add(AppendEntry(nil, Entry{Origin: origin, Soft: origin, Hard: origin, Negative: true}))
	f.Add([]byte("hf\x01\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		// Whatever decodes must encode back to the same bytes.
		if again := AppendEntry(nil, e); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", b, again)
		}
	})
}
