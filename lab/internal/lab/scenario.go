package lab

import (
	"context"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"sort"
	"time"
)

// Report is one scenario's result; its JSON is the lab's output schema:
// {"scenario","params","modes":[...]}.
type Report struct {
	Scenario string         `json:"scenario"`
	Params   map[string]any `json:"params"`
	Modes    []ModeResult   `json:"modes"`

	// Not in the JSON: what the chart and the table need besides it.
	Summary  string           `json:"-"`
	Figure   string           `json:"-"` // the figure the scenario is run to show
	Duration time.Duration    `json:"-"` // the time axis
	Window   [2]time.Duration `json:"-"`
	Marks    []Mark           `json:"-"` // events drawn on the chart
	Missing  []string         `json:"-"` // "mode: part" for each mode that could not run
}

// ModeResult is one mode's figures.
type ModeResult struct {
	Mode string `json:"mode"`
	Stats
	Window Stats              `json:"window"`
	Nodes  []Node             `json:"nodes"`
	Extra  map[string]float64 `json:"extra"`

	Series []Second `json:"-"` // per second, for the chart
}

// Node is one Redis server's share of the commands in a mode.
type Node struct {
	Addr string `json:"addr"`
	Role string `json:"role"`
	Ops  int64  `json:"ops"`
}

// Options scale a run.
type Options struct {
	// Duration replaces the scenario's default length of one mode (30 s
	// for the timed scenarios). Zero keeps the default.
	Duration time.Duration
	// Scale multiplies the length (and the fault times with it), for smoke
	// runs. Zero means 1.
	Scale float64
	// Progress, when not nil, shows how far a mode has gone.
	Progress *Progress
	// Log receives one line per mode started; nil discards.
	Log io.Writer
	// IdleCaches and IdleShards replace fleet-idle's Cache counts and
	// Cluster sizes (DefaultIdleCaches, DefaultIdleShards); nil keeps them.
	IdleCaches, IdleShards []int

	scenario string // set by Run, for the progress label
}

func (o Options) label(m Mode) string { return o.scenario + " / " + m.Name }

func (o Options) length(def time.Duration) time.Duration {
	d := def
	if o.Duration > 0 {
		d = o.Duration
	}
	if o.Scale > 0 {
		d = time.Duration(float64(d) * o.Scale)
	}
	return max(d.Round(time.Millisecond), 100*time.Millisecond)
}

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Scenario is one experiment. Plan fixes its parameters for a run; the
// returned Plan's RunMode is called once per mode, each on fresh processes.
type Scenario struct {
	Name    string
	Summary string
	// Missing, when set, names the part this scenario needs that does not
	// exist yet; the scenario is listed but not run.
	Missing string
	// OwnNetwork says the scenario runs only in a network namespace of
	// the lab's own (see InOwnNetwork); the lab command re-executes itself
	// in one for it.
	OwnNetwork bool
	// OnlyModes, when set, names the modes the scenario runs; the others
	// would repeat another scenario's run (hot-key-smear's naive mode is
	// hot-key's: the same schedule against the same client).
	OnlyModes []string
	// Separate leaves the scenario out of -scenario all: it is run by
	// name (fleet-idle, minutes of its own).
	Separate bool
	Plan     func(o Options) Plan
}

// Plan is a scenario fixed for one run.
type Plan struct {
	Params   map[string]any
	Figure   string
	Duration time.Duration
	Window   [2]time.Duration
	// Marks are events to draw on the chart (a scenario's phases).
	Marks   []Mark
	RunMode func(ctx context.Context, o Options, m Mode) (ModeResult, error)
}

// Mark is an event at an offset from the start, drawn on the chart as a
// labelled line.
type Mark struct {
	At    time.Duration
	Label string
}

var registry = map[string]Scenario{}

// Register adds a scenario; a duplicate name is a programming error.
func Register(s Scenario) {
	if _, dup := registry[s.Name]; dup {
		panic("lab: duplicate scenario " + s.Name)
	}
	registry[s.Name] = s
}

// Scenarios returns every registered scenario, by name.
func Scenarios() []Scenario {
	out := make([]Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, bool) {
	s, ok := registry[name]
	return s, ok
}

// Run runs every mode of s in turn. A mode whose parts are missing is
// recorded in Report.Missing and skipped; any other error stops the run.
func Run(ctx context.Context, s Scenario, o Options, modes []Mode) (*Report, error) {
	if s.Missing != "" {
		return nil, &MissingError{Part: s.Missing}
	}
	p := s.Plan(o)
	rep := &Report{
		Scenario: s.Name, Params: p.Params, Summary: s.Summary, Figure: p.Figure,
		Duration: p.Duration, Window: p.Window, Marks: p.Marks,
	}
	o.scenario = s.Name
	for _, m := range modes {
		if len(s.OnlyModes) > 0 && !slices.Contains(s.OnlyModes, m.Name) {
			continue
		}
		o.logf("%s: mode %s", s.Name, m.Name)
		load0 := loadAvg1()
		// Labelled, so that a CPU profile of the run (-cpuprofile) splits
		// by mode: go tool pprof -tagfocus=mode=holdfast.
		var res ModeResult
		var err error
		pprof.Do(ctx, pprof.Labels("mode", m.Name), func(ctx context.Context) {
			res, err = p.RunMode(ctx, o, m)
		})
		if IsMissing(err) {
			rep.Missing = append(rep.Missing, fmt.Sprintf("%s: %v", m.Name, err))
			continue
		}
		if err != nil {
			return rep, wrapMode(m.Name, err)
		}
		res.Mode = m.Name
		if res.Extra == nil {
			res.Extra = map[string]float64{}
		}
		res.Extra["load_avg_1m_start"] = load0
		res.Extra["load_avg_1m_end"] = loadAvg1()
		if res.Nodes == nil {
			res.Nodes = []Node{}
		}
		rep.Modes = append(rep.Modes, res)
	}
	return rep, nil
}
