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
//	hot tier          holdfast; hit; detail=hot
//	Redis             holdfast; hit; detail=shared
//	loaded            holdfast; fwd=miss; stored
//	soft..hard        holdfast; hit; fwd=stale; detail=shared/revalidating
//	Redis failing     holdfast; hit; detail=memory/tier-down (this process's last-known-good copy)
//	database failing  holdfast; hit; fwd=stale; detail=memory/source-failed (stale-if-error)
//
// detail is the Source that answered, then, when the answer has one, a
// slash and its Reason (memory/tier-slow, shared/source-slow, ...): the
// same names as the library's, so a dashboard and a header agree. fwd=stale
// marks every answer served past its soft time (Result.Stale): the cache
// went, or tried to go, to the database because its copy was stale.
//
// collapsed is added when the read waited for another read's fetch, and ttl
// is the remaining freshness in seconds (negative once stale), as RFC 9211
// defines it.
func appendCacheStatus(b []byte, res holdfast.Result, now time.Time, key string) []byte {
	b = append(b, cacheName...)
	switch res.Source {
	case holdfast.SourceHot, holdfast.SourceShared, holdfast.SourceMemory:
		b = append(b, "; hit"...)
		if res.Stale() {
			b = append(b, "; fwd=stale"...)
		}
		b = append(b, "; detail="...)
		b = append(b, res.Source.String()...)
		if res.Reason != 0 {
			b = append(b, '/')
			b = append(b, res.Reason.String()...)
		}
	default: // SourceLoaded, for this read or one it waited for
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
	if a := now.Sub(res.Origin()); a > 0 {
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
