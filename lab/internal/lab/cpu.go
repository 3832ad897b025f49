package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// A mode's cost beside its latency: the CPU time the kernel accounted to
// the client side and to the redis-servers over the mode's traffic, put in
// ModeResult.Extra as
//
//   - cpu_ms_client: the lab process's user+system time (getrusage
//     RUSAGE_SELF, every thread), plus, where the readers are processes of
//     their own (update-propagation, hot-key-warm-start), those processes'
//     CPU time from /proc/PID/stat (the same fields as the servers'), and
//     cross-process-stampede's burst processes the same way;
//   - cpu_ms_redis: the fixture's redis-servers' utime+stime+cutime+cstime
//     from /proc/PID/stat (the children's part is the fork that writes an
//     RDB for a replica's full resync, which redis-server waits for);
//   - cpu_ms_per_1k_client, cpu_ms_per_1k_redis: the same per 1,000 of the
//     mode's requests (ModeResult.Requests).
//
// The interval is the traffic only: from just before the first request to
// just after the last answer (and, for timed scenarios, the faults' end), not
// the servers' start, the cluster's creation or a reader's warm-up. The lab
// process also runs the schedule, the recorder and the stand-in source,
// whose work follows the mode's requests and loader calls, so the client
// figure bounds the client library's own cost from above rather than
// isolating it.
//
// Processes are told apart by pid and start time, so a server restarted
// during the run (replica-resync) counts its old process up to its last
// sample and its new one from zero. The processes are sampled every
// cpuSampleEvery, so a process killed during the run (redis-kill, stampede's
// Redis-down burst) loses at most that much of its CPU time after its last
// sample. The figures are Linux-only; elsewhere they are left out.

// cpuSampleEvery is how often the meter reads the processes' CPU time, the
// most a killed process's accounting can lose. Each sample is a few small
// reads of /proc, charged to the lab process like the rest of the client.
const cpuSampleEvery = 200 * time.Millisecond

// procKey identifies one process: a pid can be reused, a pid with its start
// time cannot.
type procKey struct {
	pid   int
	start uint64
}

// procSpan is one process's CPU ticks at its first and last sample.
type procSpan struct{ first, last uint64 }

// cpuMeter measures the CPU time of the lab process, of processes given by
// pid (reader children) and of redis-servers, from start to stop. Its
// sampling goroutine is owned by the meter: stop ends it and waits for it.
type cpuMeter struct {
	servers []*redistest.Process
	kids    []int

	self0  time.Duration
	selfOK bool

	mu     sync.Mutex
	redis  map[procKey]*procSpan
	client map[procKey]*procSpan

	// marks are the lab process's CPU time at the split points (see
	// splitAt), each set once its time has come.
	marks  []time.Duration
	marked []bool

	done    chan struct{}
	wg      sync.WaitGroup
	stopped sync.Once
	use     cpuUse
}

// startCPU starts measuring. kids are the pids of the mode's reader
// processes, started before and still running at stop.
func startCPU(servers []*redistest.Process, kids ...int) *cpuMeter {
	m := &cpuMeter{
		servers: servers, kids: kids,
		redis: map[procKey]*procSpan{}, client: map[procKey]*procSpan{},
		done: make(chan struct{}),
	}
	m.sample(true)
	m.self0, m.selfOK = selfCPU()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(cpuSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				m.sample(false)
			}
		}
	}()
	return m
}

// splitAt records the lab process's CPU time when each of at comes, so
// that stop can tell the cost of the phases between them apart (a fault
// window's before, in and after). The waiting goroutine is the meter's,
// ended by stop; a point not reached by then is left unmarked.
func (m *cpuMeter) splitAt(at ...time.Time) {
	m.mu.Lock()
	m.marks, m.marked = make([]time.Duration, len(at)), make([]bool, len(at))
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for i, t := range at {
			timer := time.NewTimer(time.Until(t))
			select {
			case <-m.done:
				timer.Stop()
				return
			case <-timer.C:
			}
			self, ok := selfCPU()
			m.mu.Lock()
			m.marks[i], m.marked[i] = self, ok
			m.mu.Unlock()
		}
	}()
}

// sample reads every process's ticks. A process first seen after the start
// sample was started during the run: all its time counts.
func (m *cpuMeter) sample(initial bool) {
	read := func(spans map[procKey]*procSpan, pid int) {
		if pid <= 0 {
			return
		}
		t, err := procCPU(pid)
		if err != nil {
			return // exited (killed): its last sample stands
		}
		k := procKey{pid, t.start}
		m.mu.Lock()
		defer m.mu.Unlock()
		if s, ok := spans[k]; ok {
			s.last = max(s.last, t.ticks)
			return
		}
		s := &procSpan{last: t.ticks}
		if initial {
			s.first = t.ticks
		}
		spans[k] = s
	}
	for _, s := range m.servers {
		read(m.redis, s.Pid())
	}
	for _, pid := range m.kids {
		read(m.client, pid)
	}
}

// cpuUse is what a meter measured; a figure that could not be read is not
// ok and is left out of the result.
type cpuUse struct {
	client, redis     time.Duration
	clientOK, redisOK bool

	// phases is the lab process's CPU time between the start, each split
	// point and the stop, when every point was marked; only the lab
	// process's, so it is left out when there are reader processes.
	phases []time.Duration
}

// stop takes the last sample, ends the sampling goroutine and returns the
// figures. Calling it again (a deferred stop on an early return) returns
// the same figures.
func (m *cpuMeter) stop() cpuUse {
	m.stopped.Do(func() {
		self, selfOK := selfCPU()
		m.sample(false)
		close(m.done)
		m.wg.Wait()
		m.use = m.sum(self, selfOK)
	})
	return m.use
}

func (m *cpuMeter) sum(self time.Duration, selfOK bool) cpuUse {
	m.mu.Lock()
	defer m.mu.Unlock()
	sum := func(spans map[procKey]*procSpan) time.Duration {
		var ticks uint64
		for _, s := range spans {
			ticks += s.last - s.first
		}
		return ticksToDuration(ticks)
	}
	u := cpuUse{redis: sum(m.redis), redisOK: len(m.redis) > 0}
	// The children's figure without the lab's own would be a part posing
	// as the whole; without the children's, the lab's figure is not the
	// client's either.
	if m.selfOK && selfOK && len(m.client) == len(m.kids) {
		u.client, u.clientOK = self-m.self0+sum(m.client), true
	}
	if m.marks != nil && m.selfOK && selfOK && len(m.kids) == 0 {
		u.phases = phaseTimes(m.self0, m.marks, m.marked, self)
	}
	return u
}

// phaseTimes turns cumulative CPU times at the start, the split points and
// the end into the time spent in each phase, or nil if a point is missing.
func phaseTimes(start time.Duration, marks []time.Duration, marked []bool, end time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(marks)+1)
	prev := start
	for i, t := range marks {
		if !marked[i] {
			return nil
		}
		out = append(out, t-prev)
		prev = t
	}
	return append(out, end-prev)
}

// windowPhases names a fault window's phases, in order.
var windowPhases = []string{"before", "window", "after"}

// countPhases counts the schedule's requests in each phase of the window
// (by scheduled time: a request belongs to the phase it was sent in).
func countPhases(schedule []Request, window [2]time.Duration) []int {
	n := make([]int, len(windowPhases))
	for _, r := range schedule {
		switch {
		case r.At < window[0]:
			n[0]++
		case r.At < window[1]:
			n[1]++
		default:
			n[2]++
		}
	}
	return n
}

// addPhasesTo puts cpu_ms_per_1k_client_PHASE in res.Extra for each phase
// with requests, given those phases' request counts.
func (u cpuUse) addPhasesTo(res *ModeResult, requests []int) {
	if len(u.phases) != len(requests) || len(requests) != len(windowPhases) {
		return
	}
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	for i, d := range u.phases {
		if requests[i] == 0 {
			continue
		}
		ms := float64(d) / float64(time.Millisecond)
		res.Extra["cpu_ms_per_1k_client_"+windowPhases[i]] = ms * 1000 / float64(requests[i])
	}
}

// addTo puts the figures in res.Extra; res.Requests must be final.
func (u cpuUse) addTo(res *ModeResult) {
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	put := func(name string, d time.Duration, ok bool) {
		if !ok {
			return
		}
		ms := float64(d) / float64(time.Millisecond)
		res.Extra["cpu_ms_"+name] = ms
		if res.Requests > 0 {
			res.Extra["cpu_ms_per_1k_"+name] = ms * 1000 / float64(res.Requests)
		}
	}
	put("client", u.client, u.clientOK)
	put("redis", u.redis, u.redisOK)
}

// procTimes is one process's CPU time in clock ticks, and its start time
// (ticks after boot) to tell it from a later process with the same pid.
type procTimes struct {
	ticks uint64 // utime + stime + cutime + cstime
	start uint64
}

// parseProcStat reads /proc/PID/stat's text (proc(5)). The second field is
// the command name in parentheses and may itself hold spaces and
// parentheses, so the fields are counted from after the last ')': the
// state (field 3) is the first there, utime..cstime fields 14..17 and
// starttime field 22.
func parseProcStat(s string) (procTimes, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procTimes{}, errors.New("proc stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	const (
		utime     = 14 - 3
		cstime    = 17 - 3
		starttime = 22 - 3
	)
	if len(f) <= starttime {
		return procTimes{}, fmt.Errorf("proc stat: %d fields after the command name, want more than %d", len(f), starttime)
	}
	var t procTimes
	for j := utime; j <= cstime; j++ {
		// cutime and cstime are signed in the kernel's format; they are
		// never negative, and a parse error reports one if they were.
		v, err := strconv.ParseUint(f[j], 10, 64)
		if err != nil {
			return procTimes{}, fmt.Errorf("proc stat field %d: %w", j+3, err)
		}
		t.ticks += v
	}
	v, err := strconv.ParseUint(f[starttime], 10, 64)
	if err != nil {
		return procTimes{}, fmt.Errorf("proc stat field 22: %w", err)
	}
	t.start = v
	return t, nil
}

// ticksToDuration converts clock ticks (USER_HZ) to time.
func ticksToDuration(ticks uint64) time.Duration {
	return time.Duration(ticks) * time.Second / time.Duration(clockTicks())
}

// CPURatio is holdfast's cpu_ms_per_1k_client over naive's in rep, and
// false when rep lacks either mode's figure.
func CPURatio(rep *Report) (float64, bool) {
	if rep == nil {
		return 0, false
	}
	var naive, holdfast float64
	for _, m := range rep.Modes {
		switch m.Mode {
		case "naive":
			naive = m.Extra["cpu_ms_per_1k_client"]
		case "holdfast":
			holdfast = m.Extra["cpu_ms_per_1k_client"]
		}
	}
	if naive <= 0 || holdfast <= 0 {
		return 0, false
	}
	return holdfast / naive, true
}

// WriteCPURatios writes dir/cpu.md: for each scenario in names, holdfast's
// client CPU per request over naive's in each round and the rounds'
// median. One round's ratio on a shared machine moves by a few tenths;
// the median of rounds run one after the other is the figure to judge by.
func WriteCPURatios(dir, cmd string, names []string, ratios map[string][]float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Client CPU per request, holdfast over naive\n\n`%s`\n\n", cmd)
	b.WriteString("| scenario | rounds | median | min | max |\n|---|---|---:|---:|---:|\n")
	for _, name := range names {
		rs := ratios[name]
		if len(rs) == 0 {
			continue
		}
		each := make([]string, len(rs))
		for i, r := range rs {
			each[i] = strconv.FormatFloat(r, 'f', 2, 64)
		}
		sorted := slices.Clone(rs)
		slices.Sort(sorted)
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2f |\n", name, strings.Join(each, ", "), median(sorted), sorted[0], sorted[len(sorted)-1])
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "cpu.md"), []byte(b.String()), 0o644)
}

// median of sorted, which is not empty.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
