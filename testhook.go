package holdfast

import "github.com/holdfast-dev/holdfast/internal/testhook"

func init() {
	testhook.Loading = func(ns any, key string) bool { return ns.(*Namespace).flights.inProgress(key) }
	testhook.StreamHeard = func(c any) bool { return c.(*Cache).streamHeard() }
	testhook.SeedHot = func(ns any, seed uint64) {
		if n := ns.(*Namespace); n.hot != nil {
			n.hot.Seed(seed)
		}
	}
}
