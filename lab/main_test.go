package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast/lab/internal/lab"
)

// TestMain lets the test binary serve as a lab child process, as the
// command's own binary does.
func TestMain(m *testing.M) {
	if lab.IsChild() {
		os.Exit(lab.ChildMain(os.Stdin, os.Stdout))
	}
	// Every real scenario now has its parts: one that lacks a part is
	// registered here, in the test binary only, to test how the command
	// reports it.
	lab.Register(lab.Scenario{Name: testMissing, Summary: "A scenario whose part is not built (test only).",
		Missing: "a part that does not exist (test only)"})
	os.Exit(m.Run())
}

const testMissing = "test-missing-part"

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errb}
	code = m.ParseFlags(args)
	if code == 0 {
		code = m.Run(context.Background())
	}
	m.Close()
	return code, out.String(), errb.String()
}

func TestList(t *testing.T) {
	code, out, _ := run(t, "-list")
	if code != 0 || !strings.Contains(out, "redis-freeze") || !strings.Contains(out, "missing:") {
		t.Fatalf("code %d, output:\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"-scenario", "no-such"}, {"-scenario", "stampede,no-such"}, {"-scenario", "stampede", "-scale", "0"},
		{"-scenario", "fleet-idle", "-caches", "1,x"}, {"-scenario", "fleet-idle", "-shards", "0"}} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// A scenario whose parts are missing says which and exits non-zero; it
// writes nothing pretending to be a result.
func TestMissingScenarioExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := run(t, "-scenario", testMissing, "-out", dir)
	if code != 1 || !strings.Contains(errs, "missing:") || out != "" {
		t.Fatalf("code %d, stdout %q, stderr %q", code, out, errs)
	}
	// A list runs each of its scenarios.
	code, _, errs = run(t, "-scenario", testMissing+", "+testMissing, "-out", dir)
	if code != 1 || strings.Count(errs, "missing:") != 2 {
		t.Fatalf("a list of two: code %d, stderr %q", code, errs)
	}
}
