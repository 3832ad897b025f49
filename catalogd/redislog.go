package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/internal/ratelog"
	"github.com/holdfast-dev/holdfast/redis"
)

// redisLogInterval is the least time between two lines about one Redis
// problem: enough to tell an operator it goes on, not one line a request.
const redisLogInterval = time.Minute

// redisWatch logs what the Redis tier's breaker and the cache's fallbacks
// keep from clients: that Redis is not connected yet, and that calls to it
// fail (refused connections, reconnects that fail, timeouts) or are skipped
// while the breaker is open. It reads the tier's counters every interval;
// a problem is logged at once, then once a redisLogInterval with a count,
// and its end once. Errors that retrying cannot fix (credentials refused, a
// certificate not trusted) are logged with their text by the tier itself
// (redis.Options.Logger).
type redisWatch struct {
	stop chan struct{}
	done chan struct{}
}

// watchRedis starts watching l, reading its counters every poll and
// writing a line about one problem at most every logEvery
// (redisLogInterval). The caller has told the operator already whether
// Redis was reachable at startup.
func watchRedis(l *redis.Lazy, log *slog.Logger, poll, logEvery time.Duration) *redisWatch {
	w := &redisWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(l, log, poll, logEvery)
	return w
}

// Close stops the watch and waits for it.
func (w *redisWatch) Close() {
	close(w.stop)
	<-w.done
}

func (w *redisWatch) run(l *redis.Lazy, log *slog.Logger, poll, logEvery time.Duration) {
	defer close(w.done)
	ctx := context.Background()
	waiting := ratelog.New(log, slog.LevelWarn, "Redis still not connected; retrying in the background", logEvery)
	waiting.Reported() // by the startup line
	failing := ratelog.New(log, slog.LevelWarn, "Redis calls failing; serving from in-process tiers and the database", logEvery)
	start := time.Now()
	var last redis.Stats
	connected, bad := false, false
	if t := l.Tier(); t != nil {
		connected, last = true, t.Stats()
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		t := l.Tier()
		if t == nil {
			waiting.Log(ctx, slog.Duration("since_start", time.Since(start).Round(time.Second)))
			continue
		}
		st := t.Stats()
		if !connected {
			connected, last = true, st
			log.Info("Redis connected", "cluster", t.Cluster(), "after", time.Since(start).Round(time.Millisecond))
			continue
		}
		// Failed calls, and calls the open breaker skipped.
		n := st.Errors - last.Errors + st.SetErrors - last.SetErrors + st.DeleteErrors - last.DeleteErrors +
			st.Bypassed - last.Bypassed + st.SetBypassed - last.SetBypassed + st.DelBypassed - last.DelBypassed
		switch {
		case n > 0:
			bad = true
			failing.Add(ctx, int(n), slog.Uint64("timeouts", st.Timeouts-last.Timeouts), slog.String("breaker", t.Health().Breaker.State))
		case bad && st.BreakerState == redis.BreakerClosed:
			bad = false
			log.Info("Redis calls succeed again", "failures_not_logged", failing.Reset())
		}
		last = st
	}
}
