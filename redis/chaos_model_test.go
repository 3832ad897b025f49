package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast"
)

// The chaos test's model of the world: a versioned source of truth, the
// history of every version (when it was superseded, when its invalidation
// returned, when the shared delete is known to have landed), and one record
// per read. The checks in chaos_check_test.go compare the two after the run.

// Database modes.
const (
	chaosDBNormal int32 = iota
	chaosDBSlow
	chaosDBFailing
)

var errChaosDBDown = errors.New("chaos: database unavailable")

// chaosDB is the fake source of truth: per key a version the writer bumps.
// The loader reads the version when it starts (a snapshot at query time) and
// returns it after the database's latency, so a slow query returns a value
// that may have been superseded meanwhile: the stale-set race.
type chaosDB struct {
	mode    atomic.Int32
	slowMin time.Duration
	slowMax time.Duration
	loads   []atomic.Int64 // loader calls per process
	fails   []atomic.Int64 // loader calls that returned an error per process

	mu   sync.Mutex
	keys []chaosKey
}

type chaosKey struct {
	name string
	cur  uint64
	vers []chaosVersion // index: version
}

// chaosVersion is one version of a key. Times are Unix nanoseconds; 0 means
// "not yet" (or "never during the run").
type chaosVersion struct {
	superseded int64 // when the writer bumped the key past this version
	invStart   int64 // when the Invalidate that followed began
	invReturn  int64 // when it returned
	// queued: when Invalidate returned, the writer's namespace had deletes
	// waiting for replay (its shared delete may not have landed).
	queued bool
	// landed: the earliest time the shared delete is known to have reached
	// Redis: invReturn when nothing was queued, else the first time after it
	// that the writer saw no pending deletes.
	landed int64
	invErr string
}

func newChaosDB(nKeys, procs int) *chaosDB {
	db := &chaosDB{
		slowMin: 200 * time.Millisecond,
		slowMax: 800 * time.Millisecond,
		loads:   make([]atomic.Int64, procs),
		fails:   make([]atomic.Int64, procs),
		keys:    make([]chaosKey, nKeys),
	}
	for i := range db.keys {
		db.keys[i] = chaosKey{name: chaosKeyName(i), vers: []chaosVersion{{}}}
	}
	return db
}

func chaosKeyName(i int) string { return fmt.Sprintf("k%03d", i) }

func chaosKeyIndex(key string) (int, bool) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, false
	}
	i, err := strconv.Atoi(key[1:])
	return i, err == nil
}

// chaosPad makes values about the size of a small product record.
var chaosPad = bytes.Repeat([]byte{'.'}, 96)

func chaosValue(key string, v uint64) []byte {
	b := make([]byte, 0, len(key)+24+len(chaosPad))
	b = append(b, key...)
	b = append(b, '|')
	b = strconv.AppendUint(b, v, 10)
	b = append(b, '|')
	return append(b, chaosPad...)
}

// parseChaosValue returns the key and version a value carries.
func parseChaosValue(b []byte) (string, uint64, bool) {
	key, rest, ok := bytes.Cut(b, []byte{'|'})
	if !ok {
		return "", 0, false
	}
	num, pad, ok := bytes.Cut(rest, []byte{'|'})
	if !ok || !bytes.Equal(pad, chaosPad) {
		return "", 0, false
	}
	v, err := strconv.ParseUint(string(num), 10, 64)
	return string(key), v, err == nil
}

// loader is process proc's database client.
func (db *chaosDB) loader(proc int) holdfast.Loader {
	return func(ctx context.Context, key string) ([]byte, error) {
		db.loads[proc].Add(1)
		i, ok := chaosKeyIndex(key)
		if !ok || i >= len(db.keys) {
			return nil, holdfast.ErrNotFound
		}
		mode := db.mode.Load()
		var lat time.Duration
		switch mode {
		case chaosDBFailing:
			lat = time.Millisecond + rand.N(4*time.Millisecond)
		case chaosDBSlow:
			lat = db.slowMin + rand.N(db.slowMax-db.slowMin)
		default:
			lat = time.Millisecond + rand.N(4*time.Millisecond)
		}
		db.mu.Lock()
		v := db.keys[i].cur
		db.mu.Unlock()
		tm := time.NewTimer(lat)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-ctx.Done():
			db.fails[proc].Add(1)
			return nil, ctx.Err()
		}
		if mode == chaosDBFailing {
			db.fails[proc].Add(1)
			return nil, errChaosDBDown
		}
		return chaosValue(key, v), nil
	}
}

// bump moves key i to its next version and returns the version it
// superseded. Only the writer calls it.
func (db *chaosDB) bump(i int) uint64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	k := &db.keys[i]
	old := k.cur
	k.vers[old].superseded = time.Now().UnixNano()
	k.cur++
	k.vers = append(k.vers, chaosVersion{})
	return old
}

// recordInvalidation stores what the writer saw of the invalidation that
// followed the bump past version v of key i.
func (db *chaosDB) recordInvalidation(i int, v uint64, start, ret int64, queued bool, err error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	cv := &db.keys[i].vers[v]
	cv.invStart, cv.invReturn, cv.queued = start, ret, queued
	if !queued {
		cv.landed = ret
	}
	if err != nil {
		cv.invErr = err.Error()
	}
}

// landAll marks every queued invalidation not yet landed as landed at now:
// the writer saw no pending deletes.
func (db *chaosDB) landAll(now int64) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for ki := range db.keys {
		vs := db.keys[ki].vers
		for v := range vs {
			if vs[v].queued && vs[v].landed == 0 && vs[v].invReturn != 0 {
				vs[v].landed = now
			}
		}
	}
}

// chaosRead is one read's record. Times are Unix nanoseconds.
type chaosRead struct {
	begin, end         int64
	origin, soft, hard int64
	ver                uint64
	key                uint16
	proc               uint8
	src                holdfast.Source
	why                holdfast.Reason
	stale, collapsed   bool
	errKind            chaosErrKind
	errMsg             string // kept for errors only
}

type chaosErrKind uint8

const (
	chaosOK chaosErrKind = iota
	chaosErrDB
	chaosErrOverloaded
	chaosErrTimeout
	chaosErrBadValue // the value did not parse, or carried another key
	chaosErrPanic
	chaosErrOther
)

var chaosErrNames = [...]string{"ok", "database error", "overloaded", "read timed out", "bad value", "panic", "other error"}

func (k chaosErrKind) String() string { return chaosErrNames[k] }

// classifyChaosErr names a read's error. timedOut: the reader's own
// context had expired when Get returned.
func classifyChaosErr(err error, timedOut bool) chaosErrKind {
	switch {
	case timedOut:
		return chaosErrTimeout
	case errors.Is(err, holdfast.ErrOverloaded):
		return chaosErrOverloaded
	case errors.Is(err, errChaosDBDown), errors.Is(err, context.DeadlineExceeded):
		// A load past LoadTimeout ends with DeadlineExceeded from the
		// loader's context: a database failure, as the caller sees it.
		return chaosErrDB
	default:
		return chaosErrOther
	}
}
