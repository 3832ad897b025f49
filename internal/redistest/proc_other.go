//go:build unix && !linux

package redistest

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the server in its own process group, so that signals
// reach the server and nothing else. Only Linux can also have the server
// killed with its parent; elsewhere Close and the tests' cleanup are all
// there is.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
