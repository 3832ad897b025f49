package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// crossProcessStampede grows the two-JVM experiment (Spring's locking Redis
// cache writer loaded once across two JVMs) to 4 OS processes × 250
// goroutines, all reading one cold key at once through the same Redis. Each
// process has its own source (200 ms loader, no cap), so the figure is loads
// per burst summed over the processes: naive loads once per goroutine;
// holdfast coalesces inside each process and takes no Redis lock for it
// (Spring's one lock per cache name stalled other keys), so at most once per
// process.
//
// The processes are the lab's own executable started again in child mode
// (ChildMain), driven over stdin/stdout: one "go KEY" line per burst, one
// JSON line back.
func crossProcessStampede(o Options) Plan {
	const (
		procs      = 4
		goroutines = 250
		reps       = 3
		loader     = 200 * time.Millisecond
	)
	d := time.Duration(reps) * (loader + 300*time.Millisecond)
	p := map[string]any{
		"processes": procs, "goroutines_per_process": goroutines, "repetitions": reps,
		"loader_ms": ms(loader), "loader_cap": 0, "ttl_s": baseTTL.Seconds(), "redis_timeout_ms": 100,
		"redis_server": "standalone, fresh per mode", "process_start": "the lab's executable in child mode",
		"naive_redis_client": "rueidis, no client-side cache, no retries",
		"holdfast_config":    holdfastConfig,
	}
	run := func(ctx context.Context, o Options, m Mode) (res ModeResult, err error) {
		srv, err := redistest.Launch(redistest.Options{})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, srv.Close()) }()
		// Building the mode here first reports a missing mode before any
		// process is started.
		r, err := m.New(ctx, ReaderConfig{RedisAddrs: []string{srv.Addr()}, Load: func(context.Context, string) ([]byte, error) { return nil, nil }})
		if err != nil {
			return res, err
		}
		r.Close()

		ops0, _ := CommandsProcessed(srv.Addr())
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var kids []*child
		defer func() {
			for _, k := range kids {
				err = errors.Join(err, k.close())
			}
		}()
		for range procs {
			k, err := startChild(cctx, m.Name, srv.Addr(), goroutines, loader)
			if err != nil {
				return res, err
			}
			kids = append(kids, k)
		}

		// CPU time is measured over the bursts: the reader processes' and
		// this one's, which only relays.
		var pids []int
		for _, k := range kids {
			pids = append(pids, k.cmd.Process.Pid)
		}
		meter := startCPU([]*redistest.Process{srv}, pids...)
		defer meter.stop()
		start := time.Now()
		rec := NewRecorder(0, 0)
		o.Progress.Begin(o.label(m), d)
		var total, worst int64
		for i := range reps {
			key := fmt.Sprintf("xstampede:%d", i)
			at := time.Since(start)
			// Send every "go" before reading any answer, so the bursts
			// overlap as closely as the pipes allow.
			for _, k := range kids {
				if err := k.send(key); err != nil {
					return res, err
				}
			}
			var loads int64
			for _, k := range kids {
				b, err := k.receive()
				if err != nil {
					return res, err
				}
				loads += b.Loads
				for j, us := range b.LatencyUS {
					o := OK
					if j < b.Errors {
						o = Failed // the child lists failed requests first
					}
					rec.Record(at, time.Duration(us)*time.Microsecond, o)
				}
				o.Progress.Add(int64(len(b.LatencyUS)))
			}
			total += loads
			worst = max(worst, loads)
		}
		cpu := meter.stop()
		res.Stats = rec.Overall()
		res.Window = rec.Window()
		res.LoaderCalls = total
		res.Series = rec.Seconds(secondsIn(time.Since(start)))
		res.Nodes = []Node{{Addr: srv.Addr(), Role: "primary", Ops: opsSince(srv.Addr(), ops0)}}
		res.Extra = map[string]float64{
			"loads_per_burst_mean": float64(total) / reps,
			"loads_per_burst_max":  float64(worst),
		}
		cpu.addTo(&res)
		return res, nil
	}
	return Plan{Params: p, Duration: d, RunMode: run,
		Figure: "loads per burst of 4 × 250 on one cold key (naive: 1,000; coalescing per process: ≤ 4)"}
}

// burstResult is a child's answer to one burst.
type burstResult struct {
	Loads     int64   `json:"loads"`
	Errors    int     `json:"errors"`
	LatencyUS []int64 `json:"latency_us"` // failed requests first
	Err       string  `json:"err,omitempty"`
}

// child is one started child process.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

const childEnv = "HOLDFAST_LAB_CHILD"

func startChild(ctx context.Context, mode, addr string, goroutines int, loader time.Duration) (*child, error) {
	k, err := launchChild(ctx,
		childEnv+"=stampede",
		"HOLDFAST_LAB_MODE="+mode,
		"HOLDFAST_LAB_ADDR="+addr,
		"HOLDFAST_LAB_GOROUTINES="+strconv.Itoa(goroutines),
		"HOLDFAST_LAB_LOADER="+loader.String(),
	)
	if err != nil {
		return nil, err
	}
	if err := k.waitReady(15 * time.Second); err != nil {
		return nil, err
	}
	return k, nil
}

// launchChild starts the lab's own executable again with env added (which
// must set childEnv to the kind of child); the child says "ready" on its
// stdout once set up (waitReady).
func launchChild(ctx context.Context, env ...string) (*child, error) {
	// A child that failed to enter child mode (a binary without the
	// IsChild check) would run the lab again and start children of its
	// own; refuse to go deeper than one level.
	if IsChild() {
		return nil, errors.New("a lab child cannot start children")
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	setParentDeath(cmd)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start child: %w", err)
	}
	k := &child{cmd: cmd, in: in, out: bufio.NewScanner(outPipe)}
	k.out.Buffer(make([]byte, 64<<10), 16<<20)
	return k, nil
}

// waitReady waits for the child's "ready" line. A child that never says it
// within limit (stuck connecting, or not a lab binary) is killed rather than
// waited for, and ended.
func (k *child) waitReady(limit time.Duration) error {
	stuck := time.AfterFunc(limit, func() { _ = k.cmd.Process.Kill() })
	ready := k.out.Scan() && k.out.Text() == "ready"
	stuck.Stop()
	if !ready {
		err := errors.Join(k.out.Err(), fmt.Errorf("child did not get ready: %q", k.out.Text()))
		return errors.Join(err, k.close())
	}
	return nil
}

func (k *child) send(key string) error {
	_, err := fmt.Fprintf(k.in, "go %s\n", key)
	return err
}

func (k *child) receive() (burstResult, error) {
	var b burstResult
	if !k.out.Scan() {
		return b, fmt.Errorf("child ended: %v", k.out.Err())
	}
	if err := json.Unmarshal(k.out.Bytes(), &b); err != nil {
		return b, err
	}
	if b.Err != "" {
		return b, errors.New("child: " + b.Err)
	}
	return b, nil
}

// close ends the child by closing its stdin and waits for it.
func (k *child) close() error {
	k.in.Close()
	return k.cmd.Wait()
}

// kill ends a child that may be busy (a run cut short): it is killed, not
// asked, so that it cannot block writing results nobody reads.
func (k *child) kill() {
	_ = k.cmd.Process.Kill()
	k.in.Close()
	_ = k.cmd.Wait()
}

// IsChild reports whether this process was started by the lab as a child.
// The lab command's main and the package's TestMain check it first.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// ChildMain runs the child side of a scenario with processes of its own,
// by the kind its environment names: update-propagation's readers (see
// propagationChildMain), hot-key-warm-start's processes (see
// warmStartChildMain), or cross-process-stampede's, which build the mode
// over the given Redis with their own 200 ms source, print "ready", and
// answer each "go KEY" line with a burst of goroutines on KEY. It returns
// the process's exit code when stdin ends.
func ChildMain(stdin io.Reader, stdout io.Writer) int {
	switch os.Getenv(childEnv) {
	case propagationChildKind:
		return propagationChildMain(stdin, stdout)
	case warmChildKind:
		return warmStartChildMain(stdin, stdout)
	case idleChildKind:
		return idleChildMain(stdin, stdout)
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "holdfast-lab child: %v\n", err)
		return 1
	}
	g, err := strconv.Atoi(os.Getenv("HOLDFAST_LAB_GOROUTINES"))
	if err != nil || g <= 0 || g > 100000 {
		return fail(fmt.Errorf("bad goroutine count %q", os.Getenv("HOLDFAST_LAB_GOROUTINES")))
	}
	loader, err := time.ParseDuration(os.Getenv("HOLDFAST_LAB_LOADER"))
	if err != nil {
		return fail(err)
	}
	var mode *Mode
	for i := range Modes {
		if Modes[i].Name == os.Getenv("HOLDFAST_LAB_MODE") {
			mode = &Modes[i]
		}
	}
	if mode == nil {
		return fail(fmt.Errorf("no mode %q", os.Getenv("HOLDFAST_LAB_MODE")))
	}
	ctx := context.Background()
	src := NewSource(SourceConfig{Latency: loader})
	r, err := mode.New(ctx, ReaderConfig{
		RedisAddrs: []string{os.Getenv("HOLDFAST_LAB_ADDR")}, Load: src.Load,
		TTL: baseTTL, StaleIfError: baseStaleIfError, Timeout: 100 * time.Millisecond,
		Leases: true, // the two-JVM question: one load across processes, not one per process
	})
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	fmt.Fprintln(stdout, "ready")
	in := bufio.NewScanner(stdin)
	enc := json.NewEncoder(stdout)
	for in.Scan() {
		key, ok := strings.CutPrefix(in.Text(), "go ")
		if !ok {
			return fail(fmt.Errorf("bad command %q", in.Text()))
		}
		before, _ := src.Calls()
		lat := make([]time.Duration, g)
		errs := make([]error, g)
		release := make(chan struct{})
		var wg sync.WaitGroup
		for i := range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-release
				t0 := time.Now()
				bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, _, errs[i] = r.Get(bctx, key)
				cancel()
				lat[i] = time.Since(t0)
			}()
		}
		close(release)
		wg.Wait()
		after, _ := src.Calls()
		res := burstResult{Loads: after - before}
		for i := range g { // failed first, see burstResult
			if errs[i] != nil {
				res.Errors++
				res.LatencyUS = append(res.LatencyUS, lat[i].Microseconds())
			}
		}
		for i := range g {
			if errs[i] == nil {
				res.LatencyUS = append(res.LatencyUS, lat[i].Microseconds())
			}
		}
		if err := enc.Encode(res); err != nil {
			return fail(err)
		}
	}
	return 0
}
