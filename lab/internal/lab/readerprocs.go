package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// Scenarios whose readers are processes of their own (update-propagation,
// hot-key-warm-start) share this plumbing: on the lab's side, starting the
// processes together and folding in what they report; on the child's, the
// mode it runs, the wait for the invalidation stream and the start line.

// childTotals is what every reader process reports last (its Done line),
// beside its scenario's own figures.
type childTotals struct {
	Done           bool               `json:"done,omitempty"`
	Stats          map[string]float64 `json:"stats,omitempty"`
	Loads          int64              `json:"loads,omitempty"`
	LoadsWindow    int64              `json:"loads_window,omitempty"`
	LoadsPerSecond []int64            `json:"loads_per_second,omitempty"`
}

// readerProcs are a scenario's started reader processes. close ends them:
// asked to (stdin closed) once their results are in, killed otherwise, so
// that a run cut short leaves none behind.
type readerProcs struct {
	kids  []*child
	clean bool // every result read: close asks rather than kills
}

// startReaderProcs starts one process of kind per config (its config as
// JSON in configEnv) and waits until every one is ready. On an error the
// processes started so far are in the result, for its close.
func startReaderProcs[C any](ctx context.Context, kind, configEnv string, cfgs []C, ready time.Duration) (*readerProcs, error) {
	p := &readerProcs{}
	for _, cfg := range cfgs {
		b, err := json.Marshal(cfg)
		if err != nil {
			return p, err
		}
		k, err := launchChild(ctx, childEnv+"="+kind, configEnv+"="+string(b))
		if err != nil {
			return p, err
		}
		p.kids = append(p.kids, k)
	}
	// They set up side by side.
	for _, k := range p.kids {
		if err := k.waitReady(ready); err != nil {
			return p, fmt.Errorf("reader process: %w", err)
		}
	}
	return p, nil
}

// pids returns the processes' ids, for the CPU meter.
func (p *readerProcs) pids() []int {
	var out []int
	for _, k := range p.kids {
		out = append(out, k.cmd.Process.Pid)
	}
	return out
}

// begin starts a CPU meter over the processes and servers, then tells
// every process to start its schedule 300 ms from now (time for the line
// to reach each), and returns that start. The meter is the caller's to
// stop, whatever the error.
func (p *readerProcs) begin(servers []*redistest.Process) (time.Time, *cpuMeter, error) {
	meter := startCPU(servers, p.pids()...)
	start := time.Now().Add(300 * time.Millisecond)
	for _, k := range p.kids {
		if _, err := fmt.Fprintf(k.in, "go %d\n", start.UnixNano()); err != nil {
			return start, meter, err
		}
	}
	return start, meter, nil
}

func (p *readerProcs) close() error {
	var err error
	for _, k := range p.kids {
		if p.clean {
			err = errors.Join(err, k.close())
		} else {
			k.kill()
		}
	}
	return err
}

// receiveLines reads k's JSON lines into a fresh M each, calls each with
// it, and returns once each reports the last line.
func receiveLines[M any](k *child, each func(*M) (last bool)) error {
	for {
		if !k.out.Scan() {
			return fmt.Errorf("ended before its results: %v", k.out.Err())
		}
		var msg M
		if err := json.Unmarshal(k.out.Bytes(), &msg); err != nil {
			return err
		}
		if each(&msg) {
			return nil
		}
	}
}

// add folds a process's totals into res: its Stats summed into Extra, its
// loader calls, and its loads per second into perSecond.
func (t childTotals) add(res *ModeResult, perSecond *[]int64) {
	if res.Extra == nil {
		res.Extra = map[string]float64{}
	}
	for name, v := range t.Stats {
		res.Extra[name] += v
	}
	res.LoaderCalls += t.Loads
	res.Window.LoaderCalls += t.LoadsWindow
	for s, n := range t.LoadsPerSecond {
		for len(*perSecond) <= s {
			*perSecond = append(*perSecond, 0)
		}
		(*perSecond)[s] += n
	}
}

// nodeOps returns each node's commands processed so far, for
// finishProcResult's per-node figures.
func nodeOps(c *Cluster) []int64 {
	ops := make([]int64, len(c.Nodes))
	for i, n := range c.Nodes {
		ops[i], _ = CommandsProcessed(n.Addr())
	}
	return ops
}

// finishProcResult fills res from rec's latencies over a run of d, keeping
// the loader calls the processes reported, with their loads per second in
// the series, and each node's role and commands since ops0.
func finishProcResult(res *ModeResult, rec *Recorder, d time.Duration, perSecond []int64, c *Cluster, ops0 []int64) {
	calls, winCalls := res.LoaderCalls, res.Window.LoaderCalls
	res.Stats = rec.Overall()
	res.Window = rec.Window()
	res.LoaderCalls, res.Window.LoaderCalls = calls, winCalls
	res.Series = rec.Seconds(secondsIn(d))
	for s, n := range perSecond {
		if s < len(res.Series) {
			res.Series[s].LoaderCalls = n
		}
	}
	for i, n := range c.Nodes {
		role, err := Role(n.Addr())
		if err != nil {
			role = "unknown"
		}
		res.Nodes = append(res.Nodes, Node{Addr: n.Addr(), Role: role, Ops: opsSince(n.Addr(), ops0[i])})
	}
}

// modeNamed returns the mode called name, for a child told it by name.
func modeNamed(name string) (*Mode, error) {
	for i := range Modes {
		if Modes[i].Name == name {
			return &Modes[i], nil
		}
	}
	return nil, fmt.Errorf("no mode %q", name)
}

// waitHeard waits until r, when it has an invalidation stream (holdfast),
// hears it.
func waitHeard(r Reader, limit time.Duration) error {
	heard := streamHeard(r)
	if heard == nil {
		return nil
	}
	deadline := time.Now().Add(limit)
	for !heard() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the invalidation stream was not heard within %v", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// readStart reads the lab's "go START" (Unix ns) line. ok is false when
// stdin ended first: the lab gave up before the run.
func readStart(in *bufio.Scanner) (start time.Time, ok bool, err error) {
	if !in.Scan() {
		return time.Time{}, false, nil
	}
	ns, found := strings.CutPrefix(in.Text(), "go ")
	n, perr := strconv.ParseInt(ns, 10, 64)
	if !found || perr != nil {
		return time.Time{}, false, fmt.Errorf("bad command %q", in.Text())
	}
	return time.Unix(0, n), true, nil
}
