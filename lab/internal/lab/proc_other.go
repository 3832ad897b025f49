//go:build !linux

package lab

import (
	"errors"
	"os/exec"
	"time"
)

// setParentDeath has no portable equivalent; the lab's own cleanup on exit
// and on SIGINT/SIGTERM is all there is.
func setParentDeath(cmd *exec.Cmd) {}

// errNoProc: the CPU figures read /proc, which only Linux has here; the
// meter leaves them out.
var errNoProc = errors.New("no /proc on this system")

// selfCPU is not measured here: the lab's CPU figures are Linux-only.
func selfCPU() (time.Duration, bool) { return 0, false }

// procCPU is not measured here: the lab's CPU figures are Linux-only.
func procCPU(int) (procTimes, error) { return procTimes{}, errNoProc }

// clockTicks is never used without /proc; 100 keeps the conversion defined.
func clockTicks() int64 { return 100 }
