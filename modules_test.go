package holdfast_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The core module requires no other module: an application that imports
// only holdfast (and brings its own tier, or package redis's module) gets
// no third-party module with it. OpenTelemetry, Prometheus and rueidis live
// in modules of their own.
func TestCoreModuleHasNoRequirements(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	if mods := strings.Fields(string(out)); len(mods) != 1 || mods[0] != "github.com/holdfast-dev/holdfast" {
		t.Fatalf("the core module's graph is %q, want itself alone", mods)
	}
}
