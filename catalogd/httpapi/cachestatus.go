package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/holdfast-dev/holdfast"
)

// cacheName is the cache's identifier in Cache-Status.
const cacheName = "holdfast"

// appendCacheStatus appends one RFC 9211 Cache-Status member for a holdfast
// read: the cache name, then hit or fwd, then the parameters. key, when not
// empty, must be printable ASCII without '"' or '\\' (an sf-string); it
// tells the members of a composed response apart.
//
//	hot             holdfast; hit; detail=hot
//	shared (Redis)  holdfast; hit; detail=shared
//	last-known-good holdfast; hit; detail=last-known-good (Redis failing, value within its TTL)
//	loaded          holdfast; fwd=miss; stored
//	soft..hard      holdfast; hit; fwd=stale; detail=stale-while-revalidate
//	past hard       holdfast; hit; detail=stale-if-error
//	past hard, slow holdfast; hit; detail=stale-on-slow-load (the load outlasted SlowLoadGrace)
//	Redis slow      holdfast; hit; detail=memory-on-slow-read (last-known-good; Redis outlasted the slow-read delay)
//
// collapsed is added when the read waited for another read's fetch, and ttl
// is the remaining freshness in seconds (negative once stale), as RFC 9211
// defines it.
func appendCacheStatus(b []byte, res holdfast.Result, now time.Time, key string) []byte {
	b = append(b, cacheName...)
	switch res.Source {
	case holdfast.SourceHot:
		b = append(b, "; hit; detail=hot"...)
	case holdfast.SourceShared:
		b = append(b, "; hit; detail=shared"...)
	case holdfast.SourceLastKnownGood:
		b = append(b, "; hit; detail=last-known-good"...)
	case holdfast.SourceStale:
		b = append(b, "; hit; fwd=stale; detail=stale-while-revalidate"...)
	case holdfast.SourceStaleOnError:
		b = append(b, "; hit; detail=stale-if-error"...)
	case holdfast.SourceStaleOnSlowLoad:
		// Served stale while the database is slow, as stale-if-error is
		// while it fails; the detail tells the two apart.
		b = append(b, "; hit; detail=stale-on-slow-load"...)
	case holdfast.SourceMemoryOnSlowRead:
		// Served from this process's memory while Redis is slow, as
		// last-known-good is while it fails.
		b = append(b, "; hit; detail=memory-on-slow-read"...)
	case holdfast.SourceMemoryForBusyNode:
		// A fresh copy in this process's memory, served to spare a Redis
		// node that carries more than its share.
		b = append(b, "; hit; detail=memory-for-busy-node"...)
	default: // SourceLoaded, SourceJoined (a miss another read loaded)
		b = append(b, "; fwd=miss; stored"...)
	}
	if res.Collapsed {
		b = append(b, "; collapsed"...)
	}
	b = append(b, "; ttl="...)
	b = strconv.AppendInt(b, int64(res.Soft().Sub(now)/time.Second), 10)
	if key != "" {
		b = append(b, `; key="`...)
		b = append(b, key...)
		b = append(b, '"')
	}
	return b
}

// ageSeconds is the Age of a value: whole seconds since it was read from the
// database, never negative. The origin time travels with the value through
// every tier, so a value copied from Redis keeps its true age.
func ageSeconds(res holdfast.Result, now time.Time) int64 {
	if a := res.Age(now); a > 0 {
		return int64(a / time.Second)
	}
	return 0
}

// setCacheHeaders sets Cache-Status from the members in status and Age from
// the oldest of the values that make up the response.
func setCacheHeaders(h http.Header, status []byte, age int64) {
	// Direct map writes: the names are canonical already, and Set would
	// canonicalize them again on every response.
	h["Cache-Status"] = []string{string(status)}
	h["Age"] = []string{strconv.FormatInt(age, 10)}
}
