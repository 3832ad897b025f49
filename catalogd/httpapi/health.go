package httpapi

import (
	"context"
	"encoding/json"
	"math"
	"net/http"

	"github.com/holdfast-dev/holdfast"
)

// healthz is liveness: the process runs and serves HTTP. It checks no
// dependency, so that a database or Redis outage never gets a healthy
// process restarted (the cache is what rides out such outages).
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = jsonContentType
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

type checkResult struct {
	Status   string `json:"status"` // "ok" or "down"
	Required bool   `json:"required"`
	Error    string `json:"error,omitempty"`
}

type readyBody struct {
	Status string                 `json:"status"` // "ready" or "not_ready"
	Checks map[string]checkResult `json:"checks"`
}

// readyz is readiness: 200 when the database answers a query, else 503 so
// that a load balancer stops sending traffic. The other checks (Redis) are
// reported in the body but are not required: without Redis catalogd serves
// from its in-process tiers and the database (production cache clusters keep
// readiness separate from liveness for the same reason: a node that is alive
// is not necessarily fit to take traffic).
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	body := readyBody{Status: "ready", Checks: map[string]checkResult{}}
	checks := append([]Check{{Name: "database", Required: true, Func: h.store.Ping}}, h.checks...)
	for _, c := range checks {
		ctx, cancel := context.WithTimeout(r.Context(), h.readyTimeout)
		err := c.Func(ctx)
		cancel()
		res := checkResult{Status: "ok", Required: c.Required}
		if err != nil {
			res.Status, res.Error = "down", err.Error()
			if c.Required {
				body.Status = "not_ready"
			}
		}
		body.Checks[c.Name] = res
	}
	b, _ := json.Marshal(body) // strings and bools: cannot fail
	w.Header()["Content-Type"] = jsonContentType
	w.Header().Set("Cache-Control", "no-store")
	if body.Status != "ready" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	w.Write(append(b, '\n'))
}

// hotKey is one entry of /v1/hotkeys.
type hotKey struct {
	Key            string  `json:"key"`
	ReadsPerSecond float64 `json:"reads_per_second"`
}

// hotKeys lists each namespace's hot keys as this instance detects them
// now, fastest first (holdfast.Namespace.HotKeys): what an operator asks
// first when one product goes viral. A namespace without detection (no
// shared tier: every key is in the hot tier) lists none.
func (h *Handler) hotKeys(w http.ResponseWriter, r *http.Request) {
	body := map[string][]hotKey{}
	for _, ns := range []*holdfast.Namespace{h.product, h.stock, h.list, h.search} {
		keys := []hotKey{}
		for _, k := range ns.HotKeys() {
			keys = append(keys, hotKey{k.Key, math.Round(k.Rate*10) / 10})
		}
		body[ns.Name()] = keys
	}
	b, _ := json.Marshal(body) // strings and finite floats: cannot fail
	w.Header()["Content-Type"] = jsonContentType
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}
