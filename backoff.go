package holdfast

import (
	"math/rand/v2"
	"time"
)

// The load-error backoff: a key whose load failed is not loaded again until
// its retry is due, and its readers are answered at once meanwhile, with a
// stale value when one may be served (the deadline of the load stage is 0:
// the source is known bad for this key).

// servedInBackoff answers j without a load while its key's retry is not
// due (see loadFailed): with a stale value when one may be served, else
// with the last load's error.
func (n *Namespace) servedInBackoff(j *job) bool {
	if n.backoff == nil {
		return false
	}
	lf := n.backoff.Get(j.key, n.now())
	if lf == nil || n.now() >= lf.retryAt {
		return false
	}
	n.ctr.inc(evErrorBackoff)
	res, err := n.failed(j.f, j.key, j.fallback, &loadError{n.name, j.key, lf.err})
	j.out, j.done = outcome{res, err}, true
	return true
}

// loadFailure is a key whose loads have been failing: the last one's
// error, how many failed in a row, and when the loader may be called again.
type loadFailure struct {
	err     error
	streak  int
	retryAt int64
}

// maxLoadErrorBackoff caps a key's wait between failed loads: after a
// source recovers, a key stays stale or failing at most this long (or its
// TTL, if shorter), while a long outage costs it about two calls a minute.
const maxLoadErrorBackoff = 30 * time.Second

// loadFailed notes a failed load of key. Its next load waits
// LoadErrorBackoff, doubled for each earlier failure in a row, up to
// the ceiling, and shortened by up to a quarter at random so that keys and
// processes that failed together do not retry together.
func (n *Namespace) loadFailed(key string, err error) {
	if n.backoff == nil {
		return
	}
	now := n.now()
	streak := 1
	if old := n.backoff.Get(key, now); old != nil {
		streak = min(old.streak+1, 64)
	}
	ceiling := max(n.p.LoadErrorBackoff, min(maxLoadErrorBackoff, n.p.TTL))
	step := n.p.LoadErrorBackoff
	for i := 1; i < streak && step < ceiling; i++ {
		step *= 2
	}
	step = min(step, ceiling)
	retryAt := now + int64(step) - rand.Int64N(int64(step)/4+1)
	// Kept a ceiling past the retry, so that a retry that fails too
	// waits longer.
	n.backoff.Set(key, loadFailure{err, streak, retryAt}, 0, retryAt+int64(ceiling), now)
}

// forgetLoadFailure starts key's backoff over: the source answered, or the
// key was invalidated. An invalidation says the source holds a new value, so
// the last failure, with the old value, says nothing about loading it; the
// next read loads at once (one call per invalidation, so the backoff still
// bounds an outage's cost while invalidations are rare beside reads).
func (n *Namespace) forgetLoadFailure(key string) {
	if n.backoff != nil && n.backoff.Get(key, n.now()) != nil {
		n.backoff.Delete(key)
	}
}
