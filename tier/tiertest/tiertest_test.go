package tiertest_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/inmem"
	"github.com/holdfast-dev/holdfast/tier"
	"github.com/holdfast-dev/holdfast/tier/tiertest"
)

// brokenEnv names, in a child process of TestSuiteFails, the broken tier
// that the child runs the suite over.
const brokenEnv = "HOLDFAST_TIERTEST_BROKEN"

// missAsError reports a miss as a failure.
type missAsError struct{ *inmem.Tier }

func (m missAsError) Get(ctx context.Context, key string) ([]byte, bool, error) {
	v, found, err := m.Tier.Get(ctx, key)
	if err == nil && !found {
		return nil, false, context.DeadlineExceeded
	}
	return v, found, err
}

// blindWrites writes whatever version it is given: no stale-set guard.
type blindWrites struct{ *inmem.Tier }

func (b blindWrites) SetIfVersion(ctx context.Context, it tier.Item, _ uint64) (bool, error) {
	return true, b.Set(ctx, it)
}

// deafToContext answers whatever its context says.
type deafToContext struct{ *inmem.Tier }

func (d deafToContext) Get(_ context.Context, key string) ([]byte, bool, error) {
	return d.Tier.Get(context.Background(), key)
}

// broken are the tiers the suite must fail, each with the check that must
// say so.
var broken = map[string]struct {
	cfg  tiertest.Config
	want string
}{
	"miss-as-error": {cfg: config(func(t *inmem.Tier) tier.Tier { return missAsError{t} }, tiertest.Capabilities{}),
		want: "--- FAIL: TestBroken/Tier/GetMissing ("},
	"blind-writes": {cfg: config(func(t *inmem.Tier) tier.Tier { return blindWrites{t} }, tiertest.Capabilities{Coordinator: true}),
		want: "--- FAIL: TestBroken/Coordinator/SetIfVersionStale ("},
	"deaf-to-context": {cfg: config(func(t *inmem.Tier) tier.Tier { return deafToContext{t} }, tiertest.Capabilities{}),
		want: "--- FAIL: TestBroken/Tier/DeadContext ("},
	"lacks-a-wanted-capability": {cfg: config(func(t *inmem.Tier) tier.Tier { return t }, tiertest.Capabilities{Smearer: true}),
		want: "the tier does not implement tier.Smearer, which Config.Want names"},
}

func config(wrap func(*inmem.Tier) tier.Tier, want tiertest.Capabilities) tiertest.Config {
	return tiertest.Config{
		New: func(*testing.T) func(*testing.T) tier.Tier {
			tr := wrap(inmem.New(nil))
			return func(*testing.T) tier.Tier { return tr }
		},
		Want: want,
	}
}

func TestMain(m *testing.M) {
	if name := os.Getenv(brokenEnv); name != "" {
		// The child: the suite over one broken tier, as a test of its own.
		b, ok := broken[name]
		if !ok {
			os.Stderr.WriteString("no broken tier " + name + "\n")
			os.Exit(2)
		}
		testing.Main(regexp.MatchString,
			[]testing.InternalTest{{Name: "TestBroken", F: func(t *testing.T) { tiertest.Run(t, b.cfg) }}}, nil, nil)
	}
	os.Exit(m.Run())
}

// The suite fails a tier that breaks a contract, and names the check: each
// broken tier runs in a child process, whose failure is the expected
// outcome.
func TestSuiteFails(t *testing.T) {
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// Only the check that must fail runs (the capabilities are
			// probed whatever the pattern).
			check := strings.TrimSuffix(strings.TrimPrefix(b.want, "--- FAIL: "), " (")
			if !strings.HasPrefix(check, "TestBroken/") {
				check = "TestBroken/Tier/GetMissing"
			}
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.v", "-test.run=^"+regexp.QuoteMeta(check)+"$")
			cmd.Env = append(os.Environ(), brokenEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("the suite over %s: err %v (want a failing exit)\n%s", name, err, out)
			}
			if !strings.Contains(string(out), b.want) {
				t.Errorf("the suite over %s failed without %q:\n%s", name, b.want, out)
			}
		})
	}
}
