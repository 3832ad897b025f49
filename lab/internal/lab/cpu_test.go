package lab

import (
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses of its own (redis-server
	// renames its process to "redis-server *:PORT"), then fields 3..22+.
	const line = "1234 (redis-server *:0 (x) y) S 1 1234 1234 0 -1 4194560 1016 0 0 0 " +
		"11 22 33 44 20 0 4 0 98765 12345678 2048 18446744073709551615 1 1 0 0 0 0 0 4096 17922 0 0 0 17 3 0 0 0 0 0\n"
	got, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := (procTimes{ticks: 11 + 22 + 33 + 44, start: 98765}); got != want {
		t.Fatalf("parseProcStat = %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"",
		"1234 (cut short) S 1 2 3",
		"1234 (no close paren S 1 1234 1234 0 -1 4194560 1016 0 0 0 11 22 33 44 20 0 4 0 98765",
		"1234 (x) S 1 1234 1234 0 -1 4194560 1016 0 0 0 11 twenty-two 33 44 20 0 4 0 98765",
	} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

// TestCPUBusyLoop: a busy loop in this process shows as client CPU time,
// both from getrusage and from this process's /proc/PID/stat. The loop runs
// until the accounting moves, so the test asks for nothing beyond "> 0".
func TestCPUBusyLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU figures are Linux-only")
	}
	if hz := clockTicks(); hz <= 0 {
		t.Fatalf("clockTicks = %d", hz)
	}
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	m := startCPU(nil)
	self0, ok := selfCPU()
	if !ok {
		t.Fatal("selfCPU not ok")
	}
	deadline := time.Now().Add(time.Minute)
	var sink uint64
	for {
		for i := range 1_000_000 {
			sink += uint64(i) * sink
		}
		now, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		self, _ := selfCPU()
		if now.ticks > before.ticks && self > self0 {
			if now.start != before.start {
				t.Fatalf("start time changed: %d then %d", before.start, now.start)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CPU time accounted after a minute of busy loop (sink %d)", sink)
		}
	}
	u := m.stop()
	if !u.clientOK || u.client <= 0 {
		t.Fatalf("client CPU %v (ok %v), want > 0", u.client, u.clientOK)
	}
	if u.redisOK {
		t.Fatalf("redis CPU reported with no servers: %v", u.redis)
	}
	res := ModeResult{Stats: Stats{Requests: 500}}
	u.addTo(&res)
	if res.Extra["cpu_ms_client"] <= 0 || res.Extra["cpu_ms_per_1k_client"] != 2*res.Extra["cpu_ms_client"] {
		t.Fatalf("extra %v", res.Extra)
	}
	if _, ok := res.Extra["cpu_ms_redis"]; ok {
		t.Fatalf("extra has a redis figure with no servers: %v", res.Extra)
	}
}

// TestCPURedisRestart: a redis-server's CPU time counts, and a server
// restarted during the measure counts both processes: the old one up to its
// last sample, the new one from its start. Each server burns CPU (a Lua
// loop) until its own accounting moves, so nothing here depends on timing.
func TestCPURedisRestart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU figures are Linux-only")
	}
	s, err := redistest.Launch(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	burn := func() {
		t.Helper()
		pid := s.Pid()
		before, err := procCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for {
			if _, err := Command(s.Addr(), 10*time.Second, "EVAL", "local x = 0 for i = 1, 1000000 do x = x + i end return x", "0"); err != nil {
				t.Fatal(err)
			}
			if now, err := procCPU(pid); err == nil && now.ticks > before.ticks {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no CPU time accounted to redis-server after a minute of Lua loops")
			}
		}
	}
	m := startCPU([]*redistest.Process{s})
	defer m.stop()
	burn()
	m.sample(false) // the old process's last sample, before the kill
	old := s.Pid()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Pid() == old {
		t.Fatalf("pid %d unchanged by the restart", old)
	}
	burn()
	u := m.stop()
	if !u.redisOK || u.redis <= 0 {
		t.Fatalf("redis CPU %v (ok %v), want > 0", u.redis, u.redisOK)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.redis) != 2 {
		t.Fatalf("%d redis processes measured, want 2 (before and after the restart): %v", len(m.redis), m.redis)
	}
	for k, sp := range m.redis {
		if sp.last <= sp.first {
			t.Errorf("process %d: ticks %d to %d, want an increase", k.pid, sp.first, sp.last)
		}
	}
}

func TestPhaseFigures(t *testing.T) {
	ms := time.Millisecond
	got := phaseTimes(100*ms, []time.Duration{150 * ms, 400 * ms}, []bool{true, true}, 420*ms)
	if want := []time.Duration{50 * ms, 250 * ms, 20 * ms}; !slices.Equal(got, want) {
		t.Fatalf("phaseTimes = %v, want %v", got, want)
	}
	if got := phaseTimes(0, []time.Duration{ms, 0}, []bool{true, false}, 3*ms); got != nil {
		t.Fatalf("phaseTimes with a point not reached = %v, want nil", got)
	}

	window := [2]time.Duration{2 * time.Second, 4 * time.Second}
	var sched []Request
	for at := time.Duration(0); at < 6*time.Second; at += 500 * ms {
		sched = append(sched, Request{At: at})
	}
	// 0, .5, 1, 1.5 before; 2 .. 3.5 in; 4 .. 5.5 after: the window's
	// bounds belong to the phase they open.
	if got, want := countPhases(sched, window), []int{4, 4, 4}; !slices.Equal(got, want) {
		t.Fatalf("countPhases = %v, want %v", got, want)
	}

	u := cpuUse{phases: []time.Duration{10 * ms, 300 * ms, 0}}
	var res ModeResult
	u.addPhasesTo(&res, []int{4, 2000, 0})
	want := map[string]float64{
		"cpu_ms_per_1k_client_before": 2500,
		"cpu_ms_per_1k_client_window": 150,
	}
	if !maps.Equal(res.Extra, want) {
		t.Fatalf("addPhasesTo: Extra = %v, want %v", res.Extra, want)
	}
	var none ModeResult
	cpuUse{}.addPhasesTo(&none, []int{1, 1, 1})
	if len(none.Extra) != 0 {
		t.Fatalf("addPhasesTo without phases: Extra = %v, want none", none.Extra)
	}
}

// TestCPUSplitAt: CPU burnt after a split point counts in the phase after
// it, and the phases add up to the whole; a point the run never reaches
// leaves the phases out.
func TestCPUSplitAt(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the CPU figures are Linux-only")
	}
	m := startCPU(nil)
	m.splitAt(time.Now().Add(20 * time.Millisecond))
	time.Sleep(60 * time.Millisecond)
	deadline := time.Now().Add(time.Minute)
	var sink uint64
	for {
		for i := range 1_000_000 {
			sink += uint64(i) * sink
		}
		if self, _ := selfCPU(); self-m.self0 > 100*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	_ = sink
	u := m.stop()
	if len(u.phases) != 2 {
		t.Fatalf("phases = %v, want 2", u.phases)
	}
	if u.phases[0]+u.phases[1] != u.client {
		t.Errorf("phases %v add up to %v, want the client's %v", u.phases, u.phases[0]+u.phases[1], u.client)
	}
	if u.phases[1] <= u.phases[0] {
		t.Errorf("phases = %v: the busy loop after the split point is not in the second", u.phases)
	}

	m = startCPU(nil)
	m.splitAt(time.Now().Add(time.Hour))
	if u := m.stop(); u.phases != nil {
		t.Errorf("split point never reached: phases = %v, want none", u.phases)
	}
}

// CPURatio divides holdfast's client CPU per request by naive's, and
// WriteCPURatios puts each round's ratio and their median in cpu.md.
func TestCPURatios(t *testing.T) {
	rep := func(naive, holdfast float64) *Report {
		return &Report{Modes: []ModeResult{
			{Mode: "naive", Extra: map[string]float64{"cpu_ms_per_1k_client": naive}},
			{Mode: "holdfast", Extra: map[string]float64{"cpu_ms_per_1k_client": holdfast}},
		}}
	}
	if r, ok := CPURatio(rep(200, 150)); !ok || r != 0.75 {
		t.Fatalf("CPURatio = %v, %v; want 0.75, true", r, ok)
	}
	if _, ok := CPURatio(&Report{Modes: []ModeResult{{Mode: "holdfast", Extra: map[string]float64{"cpu_ms_per_1k_client": 1}}}}); ok {
		t.Fatal("CPURatio without a naive mode reported a ratio")
	}
	if _, ok := CPURatio(nil); ok {
		t.Fatal("CPURatio of no report reported a ratio")
	}
	dir := t.TempDir()
	ratios := map[string][]float64{"hot-zipf": {0.9, 0.7, 0.8, 1.2}, "stampede": {0.5}}
	if err := WriteCPURatios(dir, "go run ./lab", []string{"hot-zipf", "none", "stampede"}, ratios); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| hot-zipf | 0.90, 0.70, 0.80, 1.20 | 0.85 | 0.70 | 1.20 |", "| stampede | 0.50 | 0.50 | 0.50 | 0.50 |"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("cpu.md lacks %q:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), "| none |") {
		t.Errorf("cpu.md has a row for a scenario with no ratio:\n%s", b)
	}
}
