package inmem_test

import (
	"testing"

	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
	"github.com/holdfast-dev/holdfast/tier/tiertest"
)

// The in-memory tier stands for one shared store that several Caches (the
// processes) use, so each client of it is the tier itself.
func TestConformance(t *testing.T) {
	tiertest.Run(t, tiertest.Config{
		New: func(t *testing.T) func(*testing.T) tier.Tier {
			tr := inmem.New(nil)
			return func(*testing.T) tier.Tier { return tr }
		},
		Want: tiertest.Capabilities{Coordinator: true, Refiller: true, HotSharer: true, InvalidationStream: true},
	})
}

func TestConformanceSmearing(t *testing.T) {
	tiertest.Run(t, tiertest.Config{
		New: func(t *testing.T) func(*testing.T) tier.Tier {
			tr := inmem.New(nil).Smearing(3)
			return func(*testing.T) tier.Tier { return tr }
		},
		Want: tiertest.Capabilities{Coordinator: true, Refiller: true, Smearer: true, HotSharer: true, InvalidationStream: true},
	})
}
