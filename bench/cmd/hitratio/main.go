// Command hitratio replays key sequences through holdfast's in-process store
// (read through a namespace with no shared tier) and through otter, theine,
// ristretto, sturdyc and an LRU, with Belady's optimal policy as the
// ceiling, and prints their hit ratios as a Markdown table; with -out it
// also writes an SVG chart a workload. From the repository root:
//
//	go run ./bench/cmd/hitratio -out /tmp/hitratio
//	go run ./bench/cmd/hitratio -equal bytes -out /tmp/hitratio-bytes
//	go run ./bench/cmd/hitratio -trace oltp.gz -format arc -capacities 250,500,1000,2000
//
// The default set is the six synthetic workloads at four capacities.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/holdfast-dev/holdfast/bench/internal/hitratio"
)

func main() {
	m := &Main{Stdout: os.Stdout, Stderr: os.Stderr}
	if err := m.ParseFlags(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "hitratio: %v\n", err)
		os.Exit(2)
	}
	if err := m.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "hitratio: %v\n", err)
		os.Exit(1)
	}
}

// Main is the command: its flags, then the comparison they describe.
type Main struct {
	Stdout, Stderr io.Writer

	config hitratio.Config
	out    string
}

// ParseFlags builds the comparison from the command line.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("hitratio", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	workloads := fs.String("workloads", "", "comma-separated synthetic workloads: "+strings.Join(hitratio.SyntheticNames, ", ")+" (default all of them, or none with -trace)")
	capacities := fs.String("capacities", "512,2048,8192,32768", "comma-separated cache capacities, in entries")
	caches := fs.String("caches", "", "comma-separated caches to compare (default all)")
	requests := fs.Int("requests", 500_000, "Zipf requests a synthetic run")
	keySpace := fs.Uint64("keys", 1<<19, "distinct keys of the Zipf workloads")
	seed := fs.Uint64("seed", 1, "seed of the synthetic workloads and of holdfast's hash")
	valueBytes := fs.Int("value-bytes", 64, "bytes of each value (keys are 16)")
	traces := fs.String("trace", "", "comma-separated trace files to replay (gzipped or not)")
	format := fs.String("format", hitratio.FormatARC, "format of the -trace files: arc, lirs or oracle")
	equal := fs.String("equal", "entries", "what every cache is given the same of: entries or bytes")
	fs.StringVar(&m.out, "out", "", "directory to write an SVG chart a workload into (default none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch *equal {
	case "entries":
		m.config.Mode = hitratio.EqualEntries
	case "bytes":
		m.config.Mode = hitratio.EqualBytes
	default:
		return fmt.Errorf("-equal %q: want entries or bytes", *equal)
	}
	var err error
	if m.config.Capacities, err = ints(*capacities); err != nil {
		return fmt.Errorf("-capacities: %w", err)
	}
	if m.config.Contenders, err = hitratio.SelectContenders(list(*caches)); err != nil {
		return err
	}
	names := list(*workloads)
	if names == nil && *traces == "" {
		names = hitratio.SyntheticNames
	}
	synthetic := hitratio.Synthetic{Requests: *requests, KeySpace: *keySpace, Seed: *seed}
	for _, name := range names {
		w, err := synthetic.Workload(name)
		if err != nil {
			return err
		}
		m.config.Workloads = append(m.config.Workloads, w)
	}
	for _, path := range list(*traces) {
		w, err := hitratio.ReadTraceFile(path, *format)
		if err != nil {
			return err
		}
		m.config.Workloads = append(m.config.Workloads, w)
	}
	m.config.ValueBytes = *valueBytes
	m.config.Seed = *seed
	m.config.Progress = m.Stderr
	return nil
}

// Run runs the comparison, prints its table and writes its charts.
func (m *Main) Run() error {
	res, err := hitratio.Run(m.config)
	if err != nil {
		return err
	}
	if err := res.Markdown(m.Stdout); err != nil {
		return err
	}
	if m.out == "" {
		return nil
	}
	paths, err := res.WriteCharts(m.out)
	for _, p := range paths {
		fmt.Fprintf(m.Stderr, "wrote %s\n", p)
	}
	return err
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range list(s) {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a whole number above 0", f)
		}
		out = append(out, n)
	}
	return out, nil
}
