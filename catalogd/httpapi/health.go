package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/internal/ratelog"
)

// healthz is liveness: the process runs and serves HTTP. It checks no
// dependency, so that a database or Redis outage never gets a healthy
// process restarted (the cache is what rides out such outages).
func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = jsonContentType
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte(`{"status":"ok"}` + "\n"))
}

// checkResult is one check in the /readyz body. It carries no error text:
// /readyz is open to anyone who can reach the port, and a dependency's
// error names hosts, ports, users and databases. The error goes to the log
// (readyLog).
type checkResult struct {
	Status   string `json:"status"` // "ok" or "down"
	Required bool   `json:"required"`
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
			res.Status = "down"
			if c.Required {
				body.Status = "not_ready"
			}
		}
		h.readyLog.report(r.Context(), h.log, c.Name, err)
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

// readyLogInterval is how often a failing check is logged: a load balancer
// polls /readyz every few seconds, and the error does not change that often.
const readyLogInterval = time.Minute

// readyLog logs what /readyz does not say: why a check failed. A failing
// check is logged at once and then once a readyLogInterval with the number
// of failures; its recovery is logged once. The zero value is ready to use.
type readyLog struct {
	mu      sync.Mutex
	failing map[string]*ratelog.Logger // by check name, while it fails
}

func (l *readyLog) report(ctx context.Context, log *slog.Logger, check string, err error) {
	l.mu.Lock()
	rl := l.failing[check]
	switch {
	case err != nil && rl == nil:
		if l.failing == nil {
			l.failing = map[string]*ratelog.Logger{}
		}
		rl = ratelog.New(log, slog.LevelWarn, "readiness check failing", readyLogInterval)
		l.failing[check] = rl
	case err == nil && rl != nil:
		delete(l.failing, check)
	}
	l.mu.Unlock()
	switch {
	case err != nil:
		rl.Log(ctx, slog.String("check", check), slog.String("error", err.Error()))
	case rl != nil:
		log.LogAttrs(ctx, slog.LevelInfo, "readiness check ok again", slog.String("check", check), slog.Int("failures_not_logged", rl.Reset()))
	}
}

// hotKey is one entry of the admin handler's /hotkeys.
type hotKey struct {
	Key            string  `json:"key"`
	ReadsPerSecond float64 `json:"reads_per_second"`
}

// hotKeys lists each namespace's hot keys as this instance detects them
// now, fastest first (holdfast.Stats.HotKeys): what an operator asks
// first when one product goes viral. A namespace without detection (no
// shared tier: every key is in the hot tier) lists none.
func (h *Handler) hotKeys(w http.ResponseWriter, r *http.Request) {
	body := map[string][]hotKey{}
	for _, ns := range []*holdfast.Namespace{h.product, h.stock, h.list, h.search} {
		keys := []hotKey{}
		for _, k := range ns.Stats().HotKeys() {
			keys = append(keys, hotKey{k.Key, math.Round(k.Rate*10) / 10})
		}
		body[ns.Name()] = keys
	}
	b, _ := json.Marshal(body) // strings and finite floats: cannot fail
	w.Header()["Content-Type"] = jsonContentType
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(b, '\n'))
}
