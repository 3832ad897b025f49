package httpapi

import (
	"net/http"
	"net/http/pprof"
)

// Admin returns the handler for operators only, which catalogd serves on a
// listener of its own bound to loopback (-admin-addr), never on the API's
// port:
//
//   - GET /hotkeys lists each namespace's hot keys now. They are what users
//     asked for: a search namespace's keys are other users' queries.
//   - /debug/pprof/, with Config.Pprof, serves net/http/pprof. The profiles
//     expose internals, cost CPU while they run, and /debug/pprof/cmdline
//     shows the command line with whatever secrets its flags hold.
func (h *Handler) Admin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hotkeys", h.hotKeys)
	if h.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}
