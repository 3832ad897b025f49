package holdfast

import (
	"time"

	"github.com/holdfast-dev/holdfast/internal/testhook"
)

func init() {
	testhook.Loading = func(ns any, key string) bool { return ns.(*Namespace).flights.inProgress(key) }
	testhook.StreamHeard = func(c any) bool { return c.(*Cache).streamHeard() }
	testhook.SeedHot = func(ns any, seed uint64) {
		if n := ns.(*Namespace); n.hot != nil {
			n.hot.Seed(seed)
		}
	}
	testhook.StreamHeardAt = func(c any) time.Time { return time.Unix(0, c.(*Cache).stream.heard.Load()) }
}
