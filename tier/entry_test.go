package tier

import (
	"bytes"
	"encoding/hex"
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
		{Value: []byte("own window"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(2 * time.Second), Stale: origin.Add(time.Hour), LoadCost: time.Millisecond},
		{Value: []byte("no window"), Origin: origin, Soft: origin, Hard: origin.Add(time.Second), Stale: origin.Add(time.Second)},
	} {
		b := AppendEntry(nil, e)
		got, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("DecodeEntry(AppendEntry(%+v)): %v", e, err)
		}
		if !bytes.Equal(got.Value, e.Value) || !got.Origin.Equal(e.Origin) || !got.Soft.Equal(e.Soft) ||
			!got.Hard.Equal(e.Hard) || !got.Stale.Equal(e.Stale) || got.LoadCost != e.LoadCost || got.Negative != e.Negative {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
		if len(b) != EncodedSize(e) || len(b) > HeaderSize+len(e.Value) {
			t.Fatalf("%d bytes, EncodedSize %d, HeaderSize+payload %d", len(b), EncodedSize(e), HeaderSize+len(e.Value))
		}
		if want := byte(1 + btoi(!e.Stale.IsZero())); b[2] != want {
			t.Fatalf("written as version %d, want %d", b[2], want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The bytes a version-1 envelope has always had still decode: values in a
// shared tier written by an earlier release are read, not taken for misses.
func TestDecodeEntryVersion1(t *testing.T) {
	b, _ := hex.DecodeString("6866010017bc1adb6713cd1517bc1adba2ae971517bc1adc9119bf1500002ee00000000886dea2e57b226964223a317d")
	e, err := DecodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	origin := time.Unix(1_710_271_488, 123456789)
	if string(e.Value) != `{"id":1}` || !e.Origin.Equal(origin) || !e.Soft.Equal(origin.Add(time.Second)) ||
		!e.Hard.Equal(origin.Add(5*time.Second)) || e.LoadCost != 12*time.Millisecond || !e.Stale.IsZero() || e.Negative {
		t.Fatalf("decoded %+v", e)
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
		"future version":  mutate(func(b []byte) []byte { b[2] = 3; return b }),
		"v1 read as v2":   mutate(func(b []byte) []byte { b[2] = 2; return b }),
		"unknown flag":    mutate(func(b []byte) []byte { b[3] = 0x80; return b }),
		"flipped bit":     mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
		"bad checksum":    mutate(func(b []byte) []byte { b[37] ^= 0xff; return b }),
		"plain json":      []byte(`{"id":1,"name":"not an envelope, but long enough to pass the length check"}`),
		"soft after hard": AppendEntry(nil, Entry{Value: []byte("v"), Origin: origin, Soft: origin.Add(2 * time.Second), Hard: origin.Add(time.Second)}),
		"stale before hard": func() []byte {
			b := AppendEntry(nil, Entry{Value: []byte("v"), Origin: origin, Soft: origin, Hard: origin.Add(time.Second), Stale: origin.Add(time.Minute)})
			copy(b[28:36], b[4:12]) // stale = origin
			return resealV2(b)
		}(),
		"v2 short header": AppendEntry(nil, Entry{Origin: origin, Soft: origin, Hard: origin, Stale: origin})[:44],
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
	sum := crcOf(b, headerV1)
	b[36], b[37], b[38], b[39] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	return b
}

func resealV2(b []byte) []byte {
	sum := crcOf(b, headerV2)
	b[44], b[45], b[46], b[47] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
	return b
}

func FuzzDecodeEntry(f *testing.F) {
	origin := time.Unix(1_700_000_000, 0)
	f.Add(AppendEntry(nil, Entry{Value: []byte("hello"), Origin: origin, Soft: origin.Add(time.Second), Hard: origin.Add(time.Minute)}))
	f.Add(AppendEntry(nil, Entry{Origin: origin, Soft: origin, Hard: origin, Negative: true}))
	f.Add(AppendEntry(nil, Entry{Value: []byte("hello"), Origin: origin, Soft: origin, Hard: origin.Add(time.Second), Stale: origin.Add(time.Hour)}))
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
