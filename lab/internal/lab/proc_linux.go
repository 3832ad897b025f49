package lab

import (
	"os/exec"
	"syscall"
)

// setParentDeath asks the kernel to kill the child when the lab dies, so a
// crashed or killed lab leaves no redis-server behind.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
