package lab

import (
	"os"
	"strconv"
	"strings"
)

// loadAvg1 returns the machine's 1-minute load average, or -1 where
// /proc/loadavg does not exist. The lab records it beside each mode: other
// processes on a small machine (two cores, say) move the tail, and a reader
// of the figures should be able to tell a busy run from a quiet one.
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
