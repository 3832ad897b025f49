package holdfast

import (
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/internal/local"
	"github.com/holdfast-dev/holdfast/tier"
)

// The entries Policy.LastKnownGoodBytes says its default holds, from what
// the store charges an entry: a doc figure that cannot drift from the code.
func TestLastKnownGoodBytesExamples(t *testing.T) {
	s := local.New[meta](32 << 20)
	if got := s.Cost("", 0); got != 232 {
		t.Errorf("an entry's node, index and sketch are charged %d bytes; the docs say 232", got)
	}
	for _, tc := range []struct {
		value int
		want  int64 // entries in 32 MiB, as the docs round them
	}{{16, 107_500}, {512, 40_700}, {16 << 10, 1_790}} {
		e := tier.Entry{Value: make([]byte, tc.value)}
		held := local.SizeClass(tier.EncodedSize(e))
		n := int64(32<<20) / s.Cost(strings.Repeat("k", 12), held)
		if n < tc.want || n > tc.want+tc.want/50 {
			t.Errorf("32 MiB holds %d entries of %d bytes under 12-byte keys; the docs say about %d", n, tc.value, tc.want)
		}
	}
}
