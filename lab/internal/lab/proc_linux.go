package lab

import (
	"encoding/binary"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// setParentDeath asks the kernel to kill the child when the lab dies, so a
// crashed or killed lab leaves no redis-server behind.
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// selfCPU returns the lab process's user+system time, every thread, in the
// kernel's microseconds rather than /proc's clock ticks.
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// procCPU reads the CPU time of process pid from /proc/PID/stat.
func procCPU(pid int) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	return parseProcStat(string(b))
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times. Go has no
// sysconf(_SC_CLK_TCK) without cgo; the kernel passes the same value to
// every process in its auxiliary vector (AT_CLKTCK), which /proc/self/auxv
// shows. 100, the value on every common Linux build, is the fallback.
var clockTicks = sync.OnceValue(func() int64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	// Pairs of native words (key, value), ended by a zero key.
	word := func(b []byte) uint64 {
		if strconv.IntSize == 32 {
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	n := strconv.IntSize / 8
	for ; len(b) >= 2*n; b = b[2*n:] {
		k, v := word(b), word(b[n:])
		if k == 0 {
			break
		}
		if k == atClkTck && v > 0 {
			return int64(v)
		}
	}
	return 100
})
