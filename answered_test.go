package holdfast_test

import "github.com/holdfast-dev/holdfast"

// answered reports whether res came from src for why, Stale as stale.
func answered(res holdfast.Result, src holdfast.Source, why holdfast.Reason, stale bool) bool {
	return res.Source == src && res.Reason == why && res.Stale() == stale
}
