package lab

import (
	"context"
	"testing"
	"time"
)

// redis-restart-refill and its Cluster variants run by name only (Separate),
// so TestSmokeAllScenarios skips them: each, scaled down to 1.5 s a mode,
// runs end to end against real redis-servers and reports its figures.
func TestSmokeRedisRestartRefill(t *testing.T) {
	for _, name := range []string{"redis-restart-refill", "redis-restart-refill-cluster", "redis-restart-refill-failover"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, ok := Lookup(name)
			if !ok {
				t.Fatalf("%s not registered", name)
			}
			rep, err := Run(context.Background(), s, Options{Duration: 1500 * time.Millisecond}, Modes)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Modes) != len(Modes) {
				t.Fatalf("%d modes ran, want %d (missing %v)", len(rep.Modes), len(Modes), rep.Missing)
			}
			for _, m := range rep.Modes {
				if m.LoaderCalls == 0 || m.Errors != 0 {
					t.Errorf("%s: loader calls %d, errors %d", m.Mode, m.LoaderCalls, m.Errors)
				}
				if _, ok := m.Extra["loads_after_restart"]; !ok {
					t.Errorf("%s: no loads_after_restart in %v", m.Mode, m.Extra)
				}
			}
		})
	}
}
