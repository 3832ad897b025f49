//go:build !linux

package lab

import "os/exec"

// setParentDeath has no portable equivalent; the lab's own cleanup on exit
// and on SIGINT/SIGTERM is all there is.
func setParentDeath(cmd *exec.Cmd) {}
