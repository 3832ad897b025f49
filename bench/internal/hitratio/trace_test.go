package hitratio

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestReadTrace(t *testing.T) {
	for _, tc := range []struct {
		name, format, in string
		want             []uint64
	}{
		{"arc runs", FormatARC, "1 3 0 0\n10 1 0 1\n", []uint64{1, 2, 3, 10}},
		{"arc blank lines and spaces", FormatARC, "\n  7 2 5 0  \n\n", []uint64{7, 8}},
		{"arc empty run", FormatARC, "5 0 0 0\n6 1 0 0\n", []uint64{6}},
		{"lirs", FormatLIRS, "4\n0\n4\n\n18446744073709551615\n", []uint64{4, 0, 4, 1<<64 - 1}},
		{"lirs no final newline", FormatLIRS, "1\n2", []uint64{1, 2}},
		{"oracle", FormatOracle, string(oracle(t, 9, 1<<40, 3)), []uint64{9, 1 << 40, 3}},
		{"empty", FormatOracle, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTrace(strings.NewReader(tc.in), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			// The same bytes gzipped read the same.
			got, err = ReadTrace(bytes.NewReader(gzipped(t, tc.in)), tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("gzipped: got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReadTraceMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, format, in, want string
	}{
		{"arc three fields", FormatARC, "1 1 0 0\n2 1 0\n", `line 2 "2 1 0": want four fields`},
		{"arc bad start", FormatARC, "x 1 0 0\n", `line 1 "x 1 0 0": start`},
		{"arc negative count", FormatARC, "1 -1 0 0\n", `line 1 "1 -1 0 0": count`},
		{"arc huge run", FormatARC, "1 99999999999 0 0\n", "at most 65536 blocks"},
		{"arc run wraps", FormatARC, "18446744073709551615 2 0 0\n", "does not wrap"},
		{"lirs word", FormatLIRS, "1\n2\nthree\n", `line 3 "three": want one decimal key`},
		{"lirs negative", FormatLIRS, "-1\n", `line 1 "-1": want one decimal key`},
		{"oracle truncated", FormatOracle, string(oracle(t, 1, 2)[:30]), "record 1 is 6 bytes, not 24"},
		{"unknown format", "csv", "1\n", `unknown trace format "csv"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ReadTrace(strings.NewReader(tc.in), tc.format)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error containing %q", keys, err, tc.want)
			}
		})
	}
}

func TestReadTraceBound(t *testing.T) {
	if _, err := readTrace(strings.NewReader("1 5 0 0\n"), FormatARC, 4); err == nil || !strings.Contains(err.Error(), "more than 4 requests") {
		t.Fatalf("arc: got %v, want the bound's error", err)
	}
	if _, err := readTrace(bytes.NewReader(oracle(t, 1, 2, 3)), FormatOracle, 2); err == nil || !strings.Contains(err.Error(), "more than 2 requests") {
		t.Fatalf("oracle: got %v, want the bound's error", err)
	}
	if keys, err := readTrace(bytes.NewReader(oracle(t, 1, 2)), FormatOracle, 2); err != nil || len(keys) != 2 {
		t.Fatalf("oracle at the bound: got %v, %v; want 2 keys", keys, err)
	}
}

// FuzzReadTrace feeds every decoder arbitrary bytes: none may panic or
// exceed its bound, and what decodes agrees with the input's size.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte("1 3 0 0\n10 1 0 1\n"))
	f.Add([]byte("4\n0\n\n7\n"))
	f.Add(oracle(f, 1, 2, 3))
	f.Add(gzipped(f, "1 2 0 0\n"))
	const maxKeys = 1 << 12
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, format := range []string{FormatARC, FormatLIRS, FormatOracle} {
			keys, err := readTrace(bytes.NewReader(in), format, maxKeys)
			if err != nil {
				continue
			}
			if len(keys) > maxKeys {
				t.Fatalf("%s: %d keys past the bound of %d", format, len(keys), maxKeys)
			}
			if format == FormatLIRS && !isGzip(in) && len(keys) > bytes.Count(in, []byte("\n"))+1 {
				t.Fatalf("lirs: %d keys from %d lines", len(keys), bytes.Count(in, []byte("\n"))+1)
			}
			if format == FormatOracle && !isGzip(in) {
				if len(in)%oracleRecord != 0 || len(keys) != len(in)/oracleRecord {
					t.Fatalf("oracle: %d keys from %d bytes", len(keys), len(in))
				}
				for i, k := range keys {
					if want := binary.LittleEndian.Uint64(in[i*oracleRecord+4:]); k != want {
						t.Fatalf("oracle: key %d is %d, record says %d", i, k, want)
					}
				}
			}
		}
	})
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// oracle encodes ids as oracleGeneral records.
func oracle(t testing.TB, ids ...uint64) []byte {
	t.Helper()
	var b []byte
	for i, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(i))
		b = binary.LittleEndian.AppendUint64(b, id)
		b = binary.LittleEndian.AppendUint32(b, 512)
		b = binary.LittleEndian.AppendUint64(b, ^uint64(0)) // int64 -1: no next access
	}
	return b
}

func gzipped(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
