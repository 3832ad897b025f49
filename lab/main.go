// Command lab (holdfast-lab in its messages) re-runs the experiments behind
// holdfast's design (stampedes, Redis outages, hot keys, resyncing replicas)
// against real processes: it starts redis-server itself, drives an open-model
// load through each mode (naive cache-aside, the "before" most services start
// from, then holdfast) and writes a JSON report, a markdown table and an SVG
// chart per scenario. From the repository root (the go.work there resolves
// this module's holdfast requirements):
//
//	go run ./lab -list
//	go run ./lab -scenario redis-freeze -out lab-out
//	go run ./lab -scenario all -out lab-out
//
// grey-node shapes one node's traffic with tc, which must not touch the
// machine's interfaces: for it, the command runs itself again under
// unshare -n, in a network namespace of its own (root, unshare, ip and tc).
//
// It exits non-zero when a scenario or mode could not run because a part it
// needs is not built yet; it never fakes the part.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast-dev/holdfast/lab/internal/lab"
)

func main() {
	// Started by the lab itself as one process of cross-process-stampede.
	if lab.IsChild() {
		os.Exit(childMain())
	}
	m := &Main{Stdout: os.Stdout, Stderr: os.Stderr}
	code := m.ParseFlags(os.Args[1:])
	if code == 0 && lab.InOwnNetwork() {
		if err := lab.EnterOwnNetwork(); err != nil {
			fmt.Fprintf(os.Stderr, "holdfast-lab: %v\n", err)
			os.Exit(1)
		}
	}
	if code == 0 && m.WantsOwnNetwork() && !lab.InOwnNetwork() {
		// tc must not touch the machine's interfaces: run again in a
		// network namespace of its own. Without one, the scenarios that
		// need it report it missing.
		cmd, err := lab.OwnNetworkCommand(os.Args[1:])
		if err == nil {
			os.Exit(runChild(cmd))
		}
		fmt.Fprintf(os.Stderr, "holdfast-lab: no network namespace of its own (%v)\n", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if code == 0 {
		code = m.Run(ctx)
	}
	m.Close()
	stop()
	os.Exit(code)
}

// runChild runs the lab re-executed in its own network namespace, passes
// it SIGINT and SIGTERM, and returns its exit code.
func runChild(cmd *exec.Cmd) int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-lab: %v\n", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sig:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(os.Stderr, "holdfast-lab: %v\n", err)
		return 1
	}
	return 0
}

// Main is the program: flags in, scenarios run, files out.
type Main struct {
	Stdout, Stderr io.Writer

	scenario string
	out      string
	duration time.Duration
	scale    float64
	list     bool
	caches   string
	shards   string
	cpuprof  string
	repeat   int

	progress *lab.Progress
}

// ParseFlags reads the command line; it returns a non-zero exit code on a
// usage error.
func (m *Main) ParseFlags(args []string) int {
	fs := flag.NewFlagSet("holdfast-lab", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&m.scenario, "scenario", "", "scenario to run, a comma-separated list of them (run in order, in one process, as all runs them), or all (see -list)")
	fs.StringVar(&m.out, "out", "lab-out", "directory for NAME.json, NAME.md, NAME.svg and index.md")
	fs.DurationVar(&m.duration, "duration", 0, "length of each mode of a timed scenario (default: the scenario's, 20 s for most)")
	fs.Float64Var(&m.scale, "scale", 1, "multiply the length by this, for smoke runs (e.g. 0.1)")
	fs.BoolVar(&m.list, "list", false, "list the scenarios and exit")
	fs.StringVar(&m.caches, "caches", "", "fleet-idle's idle Cache counts, comma-separated, in order (default 1,10,50,200)")
	fs.StringVar(&m.shards, "shards", "", "fleet-idle's Cluster sizes in primaries (each with one replica), comma-separated (default 3,30)")
	fs.StringVar(&m.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (every mode, the lab's own work included) to this file; each mode's samples carry the label mode (go tool pprof -tagfocus=mode=holdfast)")
	fs.IntVar(&m.repeat, "repeat", 1, "run each scenario this many times, its modes in turn each time (round K's files in DIR/round-K), and write DIR/cpu.md: holdfast's client CPU per request over naive's, each round and the median; on a busy machine one run's ratio is noise")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if m.repeat < 1 {
		fmt.Fprintln(m.Stderr, "holdfast-lab: -repeat must be at least 1")
		return 2
	}
	if !m.list && m.scenario == "" {
		fmt.Fprintln(m.Stderr, "holdfast-lab: -scenario NAME|all is required (see -list)")
		return 2
	}
	if m.scale <= 0 || m.duration < 0 {
		fmt.Fprintln(m.Stderr, "holdfast-lab: -scale must be positive and -duration not negative")
		return 2
	}
	for _, f := range []struct{ name, v string }{{"caches", m.caches}, {"shards", m.shards}} {
		if _, err := counts(f.v); err != nil {
			fmt.Fprintf(m.Stderr, "holdfast-lab: -%s: %v\n", f.name, err)
			return 2
		}
	}
	return 0
}

// counts parses a comma-separated list of positive integers; "" is nil.
func counts(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// WantsOwnNetwork reports whether a chosen scenario must run in a network
// namespace of its own (grey-node shapes traffic with tc).
func (m *Main) WantsOwnNetwork() bool {
	if m.list {
		return false
	}
	for _, s := range lab.Scenarios() {
		if !s.OwnNetwork {
			continue
		}
		if m.scenario == "all" {
			return true
		}
		for _, name := range strings.Split(m.scenario, ",") {
			if strings.TrimSpace(name) == s.Name {
				return true
			}
		}
	}
	return false
}

// Run runs the chosen scenarios and returns the exit code: 0 when every
// scenario ran in every mode, 1 otherwise.
func (m *Main) Run(ctx context.Context) int {
	if m.list {
		for _, s := range lab.Scenarios() {
			state := "runs"
			if s.Separate {
				state = "runs by name only, not in all"
			}
			if s.Missing != "" {
				state = "missing: " + s.Missing
			}
			fmt.Fprintf(m.Stdout, "%-24s %s\n%-24s (%s)\n", s.Name, s.Summary, "", state)
		}
		return 0
	}
	if m.cpuprof != "" {
		f, err := os.Create(m.cpuprof)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(m.Stderr, "holdfast-lab: -cpuprofile: %v\n", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(m.Stderr, "holdfast-lab: -cpuprofile: %v\n", err)
			}
		}()
	}
	var todo []lab.Scenario
	if m.scenario == "all" {
		for _, s := range lab.Scenarios() {
			if !s.Separate {
				todo = append(todo, s)
			}
		}
	} else {
		// A list runs its scenarios one after the other in this process,
		// as all does: what one leaves behind can show in the next.
		for _, name := range strings.Split(m.scenario, ",") {
			s, ok := lab.Lookup(strings.TrimSpace(name))
			if !ok {
				fmt.Fprintf(m.Stderr, "holdfast-lab: no scenario %q (see -list)\n", name)
				return 2
			}
			todo = append(todo, s)
		}
	}
	if lab.IsTerminal(os.Stderr) {
		m.progress = lab.NewProgress(m.Stderr)
	}
	opts := lab.Options{Duration: m.duration, Scale: m.scale, Progress: m.progress}
	opts.IdleCaches, _ = counts(m.caches)
	opts.IdleShards, _ = counts(m.shards)
	if m.progress == nil {
		opts.Log = m.Stderr
	}

	code := 0
	var index []lab.IndexEntry
	ratios := map[string][]float64{}
	for _, s := range todo {
		e := lab.IndexEntry{Name: s.Name, Summary: s.Summary}
		var rep *lab.Report
		var err error
		for round := 1; round <= m.repeat && ctx.Err() == nil; round++ {
			out := m.out
			if m.repeat > 1 {
				out = fmt.Sprintf("%s/round-%d", m.out, round)
			}
			rep, err = m.runOnce(ctx, s, opts, out, &e)
			if r, ok := lab.CPURatio(rep); ok {
				ratios[s.Name] = append(ratios[s.Name], r)
			}
			if err != nil {
				break
			}
		}
		if rep != nil {
			e.Missing = rep.Missing
		}
		switch {
		case lab.IsMissing(err):
			e.Missing = append(e.Missing, strings.TrimPrefix(err.Error(), "missing: "))
		case err != nil:
			e.Err = err
		}
		for _, miss := range e.Missing {
			m.clearBar()
			fmt.Fprintf(m.Stderr, "holdfast-lab: %s: missing: %s\n", s.Name, strings.TrimPrefix(miss, "missing: "))
		}
		if e.Err != nil {
			m.clearBar()
			fmt.Fprintf(m.Stderr, "holdfast-lab: %s: %v\n", s.Name, e.Err)
		}
		if e.Err != nil || len(e.Missing) > 0 {
			code = 1
		}
		index = append(index, e)
		if ctx.Err() != nil {
			break
		}
	}
	if m.scenario == "all" {
		dir, cmd := m.out, fmt.Sprintf("go run ./lab -scenario all -out %s", m.out)
		if m.repeat > 1 {
			dir = fmt.Sprintf("%s/round-%d", m.out, m.repeat)
			cmd += fmt.Sprintf(" -repeat %d", m.repeat)
		}
		if err := lab.WriteIndex(dir, cmd, index); err != nil {
			fmt.Fprintf(m.Stderr, "holdfast-lab: index: %v\n", err)
			code = 1
		}
	}
	if m.repeat > 1 {
		names := make([]string, len(todo))
		for i, s := range todo {
			names[i] = s.Name
		}
		cmd := fmt.Sprintf("go run ./lab -scenario %s -repeat %d -out %s", m.scenario, m.repeat, m.out)
		if m.duration > 0 {
			cmd += " -duration " + m.duration.String()
		}
		if m.scale != 1 {
			cmd += fmt.Sprintf(" -scale %g", m.scale)
		}
		if err := lab.WriteCPURatios(m.out, cmd, names, ratios); err != nil {
			fmt.Fprintf(m.Stderr, "holdfast-lab: cpu.md: %v\n", err)
			code = 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(m.Stderr, "holdfast-lab: interrupted")
		code = 1
	}
	return code
}

// runOnce runs s in every mode and writes its files to out; a run that
// produced a mode's figures marks e as ran.
func (m *Main) runOnce(ctx context.Context, s lab.Scenario, opts lab.Options, out string, e *lab.IndexEntry) (*lab.Report, error) {
	rep, err := lab.Run(ctx, s, opts, lab.Modes)
	if rep != nil && len(rep.Modes) > 0 {
		md, werr := lab.Write(out, rep)
		if werr != nil {
			return rep, errors.Join(err, werr)
		}
		e.Ran = true
		e.Report = rep
		m.clearBar()
		fmt.Fprintln(m.Stdout, md)
	}
	return rep, err
}

func (m *Main) clearBar() {
	if m.progress != nil {
		fmt.Fprint(m.Stderr, "\r\033[K")
	}
}

// Close stops the progress bar. The scenarios close their own processes.
func (m *Main) Close() {
	m.progress.Close()
}

// childMain runs a child process of the lab, with a CPU profile of its own
// when HOLDFAST_LAB_CHILD_CPUPROFILE names a directory: -cpuprofile covers
// the lab's own process, and the scenarios with reader processes of their
// own spend their client CPU in the children.
func childMain() int {
	dir := os.Getenv("HOLDFAST_LAB_CHILD_CPUPROFILE")
	if dir == "" {
		return lab.ChildMain(os.Stdin, os.Stdout)
	}
	f, err := os.Create(fmt.Sprintf("%s/child-%d.prof", dir, os.Getpid()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-lab child: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "holdfast-lab child: %v\n", err)
		return 1
	}
	defer pprof.StopCPUProfile()
	return lab.ChildMain(os.Stdin, os.Stdout)
}
