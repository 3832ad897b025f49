package httpapi

import (
	"net/http"
	"runtime"
	"time"
)

// defaultQueriesInFlight is Config.MaxQueriesInFlight's default per
// GOMAXPROCS: twice the cache's default load slots (4 × GOMAXPROCS), so
// that every slot can be loading while as many requests again wait for one
// or are answered from the cache.
const defaultQueriesInFlight = 8

// admissionWait is how long a request past its route's cap waits for a
// place before its 503: as long as holdfast's load limiter makes a load
// wait for a slot once the database is saturated. A flood's clients that
// send back to back then wait as they did for a load slot, parked and
// costing no CPU, instead of turning each refusal into at once another
// request; a client whose request finds a place within it is served.
const admissionWait = 10 * time.Millisecond

// admission caps the requests of one route in flight at once. A nil
// *admission admits every request.
type admission struct {
	places chan struct{} // one element per request in flight
}

// newAdmission returns the cap for Config.MaxQueriesInFlight max: nil
// when it is negative.
func newAdmission(max int) *admission {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = defaultQueriesInFlight * runtime.GOMAXPROCS(0)
	}
	return &admission{places: make(chan struct{}, max)}
}

// admit wraps next so that a request that finds no place within
// admissionWait is answered 503 before next parses its query or asks the
// cache: refusing a flood then costs about what routing it did, and leaves
// the CPU to the routes that are not capped.
func (h *Handler) admit(a *admission, next http.HandlerFunc) http.HandlerFunc {
	if a == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case a.places <- struct{}{}:
		default:
			t := time.NewTimer(admissionWait)
			select {
			case a.places <- struct{}{}:
				t.Stop()
			case <-t.C:
				h.writeError(w, r, errInFlight)
				return
			case <-r.Context().Done():
				t.Stop()
				h.writeError(w, r, r.Context().Err())
				return
			}
		}
		defer func() { <-a.places }()
		next(w, r)
	}
}

// errInFlight is the refusal of a request past its route's cap. It is an
// overload, as the load limiter's rejection is: the same status, code and
// Retry-After, and logged with it.
var errInFlight = errorf(http.StatusServiceUnavailable, codeOverloaded, "too many requests of this kind are in flight; retry later")
