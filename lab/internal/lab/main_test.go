package lab

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a child process of
// cross-process-stampede, as the lab command's binary does.
func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(ChildMain(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}
