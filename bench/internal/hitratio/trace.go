package hitratio

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Trace formats, as the simulators that publish traces write them:
//
//   - ARC: the traces of Megiddo and Modha's ARC paper (OLTP, P1–P14, S1–S3,
//     DS1): a line "start count ignored reqno" requests the blocks start to
//     start+count-1 in turn.
//   - LIRS: the traces of Jiang and Zhang's LIRS paper (glimpse, loop, ...):
//     one decimal key a line.
//   - Oracle: libCacheSim's oracleGeneral binary format: 24-byte
//     little-endian records of uint32 time, uint64 object id, uint32 size,
//     int64 next access (-1 for none); only the id is used.
//
// A file whose first bytes are gzip's magic is decompressed on the way
// (otter's simulator ships its traces gzipped). Zstandard, in which
// libCacheSim publishes its oracleGeneral traces, is not read: it would take
// a third-party module for a benchmark's input, where `zstd -d` does the same
// once; decompress such a file first.
const (
	FormatARC    = "arc"
	FormatLIRS   = "lirs"
	FormatOracle = "oracle"
)

// oracleRecord is the size of one oracleGeneral record.
const oracleRecord = 24

// ReadTraceFile reads the trace at path in format and returns it as a
// Workload named after the file, the same sequence for every capacity.
func ReadTraceFile(path, format string) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, err
	}
	defer f.Close()
	keys, err := ReadTrace(f, format)
	if err != nil {
		return Workload{}, fmt.Errorf("%s: %w", path, err)
	}
	name := filepath.Base(path)
	name = strings.TrimSuffix(name, ".gz")
	return Workload{Name: name, Keys: func(int) []uint64 { return keys }}, nil
}

// MaxTraceKeys bounds the requests a trace is read into: 2 GiB of keys,
// well within this machine's memory and past the published traces' few
// million, so that a corrupt or hostile file cannot exhaust memory.
const MaxTraceKeys = 1 << 28

// ReadTrace decodes a trace in format from r, gzipped or not.
func ReadTrace(r io.Reader, format string) ([]uint64, error) {
	return readTrace(r, format, MaxTraceKeys)
}

// readTrace is ReadTrace with a bound of its own on the keys, for tests.
func readTrace(r io.Reader, format string, maxKeys int) ([]uint64, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("hitratio: gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	switch format {
	case FormatARC:
		return readLines(br, maxKeys, parseARCLine)
	case FormatLIRS:
		return readLines(br, maxKeys, parseLIRSLine)
	case FormatOracle:
		return readOracle(br, maxKeys)
	}
	return nil, fmt.Errorf("hitratio: unknown trace format %q (want %s, %s or %s)", format, FormatARC, FormatLIRS, FormatOracle)
}

// maxARCRun bounds one ARC line's count: the runs of the published traces
// are at most 128 blocks (OLTP 1, P3 128), and a corrupt count must not ask
// for a slice of 2^64 keys.
const maxARCRun = 1 << 16

// readLines decodes a text trace a line at a time; blank lines are skipped.
func readLines(br *bufio.Reader, maxKeys int, parse func(line string, keys []uint64) ([]uint64, error)) ([]uint64, error) {
	sc := bufio.NewScanner(br)
	var keys []uint64
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var err error
		if keys, err = parse(line, keys); err != nil {
			return nil, fmt.Errorf("hitratio: line %d %q: %w", n, truncate(line, 40), err)
		}
		if len(keys) > maxKeys {
			return nil, fmt.Errorf("hitratio: line %d: the trace has more than %d requests", n, maxKeys)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("hitratio: reading trace: %w", err)
	}
	return keys, nil
}

// errARCLine is a line that is not "start count ignored reqno".
var errARCLine = errors.New("want four fields: start count ignored reqno")

func parseARCLine(line string, keys []uint64) ([]uint64, error) {
	f := strings.Fields(line)
	if len(f) != 4 {
		return keys, errARCLine
	}
	start, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return keys, fmt.Errorf("start: %w", err)
	}
	count, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return keys, fmt.Errorf("count: %w", err)
	}
	if count > maxARCRun || start+count < start {
		return keys, fmt.Errorf("count %d: at most %d blocks from a start that does not wrap", count, maxARCRun)
	}
	for i := range count {
		keys = append(keys, start+i)
	}
	return keys, nil
}

func parseLIRSLine(line string, keys []uint64) ([]uint64, error) {
	k, err := strconv.ParseUint(line, 10, 64)
	if err != nil {
		return keys, errors.New("want one decimal key")
	}
	return append(keys, k), nil
}

func readOracle(br *bufio.Reader, maxKeys int) ([]uint64, error) {
	var rec [oracleRecord]byte
	var keys []uint64
	for {
		n, err := io.ReadFull(br, rec[:])
		switch {
		case err == io.EOF:
			return keys, nil
		case err == io.ErrUnexpectedEOF:
			return nil, fmt.Errorf("hitratio: oracleGeneral record %d is %d bytes, not %d: the file is truncated or not in this format", len(keys), n, oracleRecord)
		case err != nil:
			return nil, fmt.Errorf("hitratio: reading trace: %w", err)
		}
		if len(keys) == maxKeys {
			return nil, fmt.Errorf("hitratio: oracleGeneral record %d: the trace has more than %d requests", len(keys), maxKeys)
		}
		keys = append(keys, binary.LittleEndian.Uint64(rec[4:12]))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
