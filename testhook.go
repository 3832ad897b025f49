package holdfast

import "github.com/holdfast-dev/holdfast/internal/testhook"

func init() {
	testhook.Loading = func(ns any, key string) bool { return ns.(*Namespace).flights.inProgress(key) }
}
