package tiertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

func (s *suite) runLeveler(t *testing.T) {
	t.Run("IdleShedsNothing", s.idleShedsNothing)
}

// A tier that no one reads from has even nodes, so Shed says no to every
// key; and it answers at once, being on the read path (it must not wait on
// the network).
func (s *suite) idleShedsNothing(t *testing.T) {
	l := s.open(t).(tier.Leveler)
	const n = 10_000
	start := time.Now()
	shed := 0
	for i := range n {
		if l.Shed(fmt.Sprint("ns:k", i)) {
			shed++
		}
	}
	if shed > 0 {
		t.Errorf("Shed said yes to %d of %d keys of an idle tier", shed, n)
	}
	// A network round trip each would take seconds; a bound far above a
	// loaded machine's cost of a memory lookup each.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d calls of Shed took %v", n, d)
	}
}
