package holdfast

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// The shared tier's health (tier.HealthReporter) is the tier's to judge;
// the Cache only asks it (healthyEvery while the tier is up, healthEvery
// otherwise) and logs what changed: one line when
// the tier goes down, with why, and one when it is back, with how long it
// was out. A tier that connects in the background has its capabilities
// logged once it has connected, when they are known.

// healthEvery is how often the Cache asks the shared tier for its health
// while it is down or has not connected yet: its recovery, or its
// capabilities, are logged within this of the tier's noticing it.
// healthyEvery is how often while it is up: an outage is logged within
// this of its start, and an idle process wakes once a second for it.
const (
	healthEvery  = 250 * time.Millisecond
	healthyEvery = time.Second
)

// outageLogEvery is the least time between two lines saying the shared tier
// is down: a tier flapping every second logs two lines a period, and the
// next down line counts the outages it did not log.
const outageLogEvery = 30 * time.Second

// SharedHealth returns the shared tier's health, and false when there is
// no shared tier or it does not report its health (tier.HealthReporter,
// found down the Unwrap chain like the other capabilities).
func (c *Cache) SharedHealth() (tier.Health, bool) {
	if c.caps.health == nil {
		return tier.Health{}, false
	}
	return c.caps.health.Health(), true
}

// watchHealth logs the shared tier's outages and, once it has connected,
// its capabilities, until the Cache closes.
func (c *Cache) watchHealth(hr tier.HealthReporter, announced bool) {
	t := time.NewTimer(healthEvery)
	defer t.Stop()
	var ol outageLog
	for {
		h := hr.Health()
		if !announced && h.Connected {
			announced = true
			c.logCapabilities()
		}
		if line, ok := ol.observe(h, c.clock.Now()); ok {
			line.log(c.logger())
		}
		if announced && !ol.down {
			t.Reset(healthyEvery)
		} else {
			t.Reset(healthEvery)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// logCapabilities logs what the shared tier can do for the Cache.
func (c *Cache) logCapabilities() {
	c.logger().Info("holdfast: shared tier", "type", fmt.Sprintf("%T", c.opts.Shared), "capabilities", c.caps.capabilities().String())
}

// outageLog decides which changes of the shared tier's health are logged.
// It is not safe for concurrent use and never reads the clock.
type outageLog struct {
	down      bool      // the tier is down, as last observed
	downSince time.Time // when the outage being observed began
	logged    bool      // a down line was logged and its recovery not yet
	loggedAt  time.Time // when the last down line was
	since     time.Time // the start of the outage the down line reported
	unlogged  int       // outages begun since the last down line and not logged
}

// outageLine is one line of an outageLog.
type outageLine struct {
	down     bool
	reason   string
	since    time.Time
	outFor   time.Duration // of a recovery: how long the tier was down
	unlogged int           // outages not logged since the last down line
}

// observe takes the tier's health at now and returns the line to log, if
// any: a down line at once, unless one was logged within outageLogEvery
// (then when the period ends, if the tier is still down); the recovery of
// an outage that was logged, at once.
func (l *outageLog) observe(h tier.Health, now time.Time) (outageLine, bool) {
	if h.Down && !l.down {
		l.down, l.downSince = true, now
		l.unlogged++
	} else if !h.Down {
		l.down = false
	}
	switch {
	case l.logged && !l.down:
		l.logged = false
		return outageLine{outFor: now.Sub(l.since), since: l.since}, true
	case !l.logged && l.down && (l.loggedAt.IsZero() || now.Sub(l.loggedAt) >= outageLogEvery):
		line := outageLine{down: true, reason: h.Reason, since: l.downSince, unlogged: l.unlogged - 1}
		l.logged, l.loggedAt, l.since, l.unlogged = true, now, l.downSince, 0
		return line, true
	}
	return outageLine{}, false
}

func (ln outageLine) log(log *slog.Logger) {
	if !ln.down {
		log.Info("holdfast: shared tier recovered", "tier", "shared", "down_for", ln.outFor.Round(time.Millisecond), "since", ln.since)
		return
	}
	attrs := []any{"tier", "shared", "reason", ln.reason, "since", ln.since}
	if ln.unlogged > 0 {
		attrs = append(attrs, "outages_not_logged", ln.unlogged)
	}
	log.Warn("holdfast: shared tier down; serving from memory and the loader", attrs...)
}
