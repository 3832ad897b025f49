package redistest

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the server in its own process group, so that signals
// reach the server and nothing else, and asks the kernel to kill it when
// the process that started it dies, so that a crashed test binary or lab
// leaks no server.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
