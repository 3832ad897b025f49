package redis

import (
	"errors"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/internal/breaker"
	"github.com/holdfast-dev/holdfast/tier"
)

// Health as the tier reports it (tier.HealthReporter): the breaker decides
// whether the tier is down, and the last failure says why, so that the
// Cache's outage line and the exporters agree with what the calls see.

var (
	_ tier.HealthReporter = (*Tier)(nil)
	_ tier.HealthReporter = (*Lazy)(nil)
)

// reasonOf is what a failed call's err says of why Redis does not serve.
func reasonOf(err error) string {
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		err = re // New's error wraps it, and configErrorKind wants it bare
	}
	switch {
	case configErrorKind(err) != "":
		return tier.ReasonAuthRefused
	case isTimeout(err):
		return tier.ReasonTimeout
	}
	return tier.ReasonUnreachable
}

// breakerName names a breaker state as the exporters' labels do.
func breakerName(s breaker.State) string {
	switch s {
	case breaker.Open:
		return "open"
	case breaker.HalfOpen:
		return "half_open"
	}
	return "closed"
}

// Health implements tier.HealthReporter: down while the breaker is not
// closed, for the reason of the last failed call.
func (d *tierDriver) Health() tier.Health {
	t := (*Tier)(d)
	bc := t.br.Counts()
	h := tier.Health{
		Connected: true,
		Down:      bc.State != breaker.Closed,
		Breaker:   tier.Breaker{State: breakerName(bc.State), Opens: bc.Opens, Transitions: bc.Transitions},
	}
	if h.Down {
		h.Reason = tier.ReasonUnreachable
		if r, ok := t.lastReason.Load().(string); ok {
			h.Reason = r
		}
	}
	if t.nodes != nil {
		for _, n := range t.nodeStats(false) {
			state := "ready"
			switch n.State {
			case NodeNotReady:
				state = "not_ready"
			case NodeEjected:
				state = "ejected"
			}
			h.Nodes = append(h.Nodes, tier.Node{
				Addr: n.Addr, Primary: n.Primary, State: state,
				Requests: n.Requests, Failures: n.Failures, Timeouts: n.Timeouts,
				Reads: n.Reads, ReadShare: n.ReadShare, Ejections: n.Ejections,
			})
		}
	}
	return h
}

// Health implements tier.HealthReporter: the Tier's once connected; before,
// down for the reason of the last failed attempt (none during the first),
// with the breaker reported open, as every call is skipped.
func (d *lazyDriver) Health() tier.Health {
	l := (*Lazy)(d)
	if t := l.tier.Load(); t != nil {
		return t.Health()
	}
	h := tier.Health{Breaker: tier.Breaker{State: "open"}}
	if r, ok := l.reason.Load().(string); ok {
		h.Down, h.Reason = true, r
	}
	return h
}
