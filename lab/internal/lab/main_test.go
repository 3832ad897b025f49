package lab

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a child process of
// cross-process-stampede, as the lab command's binary does, and as
// TestGreyNodeSmoke's child in a network namespace of its own.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain(os.Stdin, os.Stdout))
	}
	if InOwnNetwork() {
		os.Exit(greyNodeSmokeChild(os.Stdout))
	}
	os.Exit(m.Run())
}
