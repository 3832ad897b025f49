package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

// Traffic is a timed scenario: an open-model schedule of reads against one
// fresh redis-server and a fresh Source, with faults injected at set times.
// Most scenarios are one of these with different faults.
type Traffic struct {
	Schedule []Request
	Duration time.Duration
	Window   [2]time.Duration
	Source   SourceConfig
	Reader   ReaderConfig // RedisAddrs and Load are filled in
	// MaxInFlight bounds concurrent requests; zero means 2,000.
	MaxInFlight int
	// Cluster runs against 3 primaries + 3 replicas instead of one server.
	Cluster bool
	// NodeArgs, when set, adds to the i-th cluster node's command line
	// (see StartClusterWith).
	NodeArgs func(i int) []string
	// NewCluster, when set, builds the Cluster instead (Cluster is then
	// implied): fleet-loss's 30 + 30.
	NewCluster func(ctx context.Context) (*Cluster, error)
	// Sentinel runs against a primary with two replicas under three
	// sentinels (redistest.LaunchSentinel) instead of one server; the
	// modes find the primary through the sentinels.
	Sentinel bool
	// Faults run at their offsets, in order, on one goroutine.
	Faults []Fault
	// Prepare runs once the servers are up, before the Reader is built
	// (grey-node puts a proxy in front of a node here, which the Reader
	// must find in the Cluster's topology).
	Prepare func(f *Fixture) error
	// Setup runs after the fixture is built, before the first request.
	Setup func(f *Fixture) error
	// Extra adds scenario figures to the result once the mode has run.
	Extra func(f *Fixture, r *ModeResult)
	// Observe, when set, sees every answer; before is what it returned
	// when called at the request's start (a scenario's snapshot of the
	// source, say).
	Observe func(f *Fixture, req Request, before any, value []byte, err error)
	Before  func(f *Fixture, req Request) any
	// Aside, when set, picks requests to record apart from the others
	// (their figures go to extra as aside_*): hit-during-load keeps its
	// slow loads out of the hits' percentiles.
	Aside func(key string) bool
}

// Fault is an action at an offset from the start: freeze Redis, slow the
// source down...
type Fault struct {
	At   time.Duration
	Name string
	Do   func(ctx context.Context, f *Fixture) error
}

// Fixture is what a mode runs against: one standalone server (Redis), a
// cluster (Cluster) or a Sentinel group (Sentinel), only one of them.
type Fixture struct {
	Redis    *redistest.Process
	Cluster  *Cluster
	Sentinel *redistest.SentinelGroup[*redistest.Process]
	Source   *Source
	Reader   Reader
	Start    time.Time
}

// servers returns every redis-server of the fixture.
func (f *Fixture) servers() []*redistest.Process {
	if f.Cluster != nil {
		return f.Cluster.Nodes
	}
	if f.Sentinel != nil {
		return f.Sentinel.Nodes()
	}
	return []*redistest.Process{f.Redis}
}

// RunMode runs the traffic once with mode m.
func (t Traffic) RunMode(ctx context.Context, o Options, m Mode) (res ModeResult, err error) {
	f := &Fixture{}
	if t.Cluster || t.NewCluster != nil {
		start := func(ctx context.Context) (*Cluster, error) { return StartClusterWith(ctx, t.NodeArgs) }
		if t.NewCluster != nil {
			start = t.NewCluster
		}
		c, err := start(ctx)
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, c.Close()) }()
		f.Cluster = c
	} else if t.Sentinel {
		g, err := redistest.LaunchSentinel(ctx, redistest.SentinelConfig{})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, g.Close()) }()
		f.Sentinel = g
	} else {
		srv, err := redistest.Launch(redistest.Options{})
		if err != nil {
			return res, err
		}
		defer func() { err = errors.Join(err, srv.Close()) }()
		f.Redis = srv
	}
	var addrs []string
	for _, s := range f.servers() {
		addrs = append(addrs, s.Addr())
	}

	if t.Prepare != nil {
		if err := t.Prepare(f); err != nil {
			return res, fmt.Errorf("prepare: %w", err)
		}
	}
	src := NewSource(t.Source)
	f.Source = src
	cfg := t.Reader
	cfg.RedisAddrs = addrs
	if f.Sentinel != nil {
		cfg.RedisAddrs, cfg.SentinelAddrs, cfg.SentinelMaster = nil, f.Sentinel.SentinelAddrs(), f.Sentinel.MasterName()
	}
	cfg.Load = src.Load
	cfg.LoadCap = t.Source.Cap
	r, err := m.New(ctx, cfg)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, r.Close()) }()
	f.Reader = r

	if t.Setup != nil {
		if err := t.Setup(f); err != nil {
			return res, fmt.Errorf("setup: %w", err)
		}
	}
	ops0 := make([]int64, len(addrs))
	for i, a := range addrs {
		ops0[i], _ = CommandsProcessed(a)
	}

	// CPU time is measured over the traffic and its faults, not the
	// fixture's start or Setup's warm-up.
	meter := startCPU(f.servers())
	defer meter.stop()
	// Start a little ahead so that the first request is not late because of
	// the goroutines started below.
	f.Start = time.Now().Add(20 * time.Millisecond)
	phased := t.Window[1] > t.Window[0]
	if phased {
		meter.splitAt(f.Start.Add(t.Window[0]), f.Start.Add(t.Window[1]))
	}
	src.Begin(f.Start, t.Window[0], t.Window[1])
	rec := NewRecorder(t.Window[0], t.Window[1])
	aside := NewRecorder(t.Window[0], t.Window[1])
	recFor := func(key string) *Recorder {
		if t.Aside != nil && t.Aside(key) {
			return aside
		}
		return rec
	}
	o.Progress.Begin(o.label(m), t.Duration)

	// The fault goroutine is owned here: cancelled and waited for before
	// returning, even when the run is cut short.
	fctx, cancelFaults := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	var faultErr error
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		faultErr = runFaults(fctx, f, t.Faults)
	}()

	var dropped atomic.Int64
	d := Driver{MaxInFlight: t.MaxInFlight}
	if d.MaxInFlight == 0 {
		d.MaxInFlight = 2000
	}
	d.Run(ctx, f.Start, t.Schedule, func(ctx context.Context, i int, late time.Duration, drop bool) {
		req := t.Schedule[i]
		if drop {
			dropped.Add(1)
			recFor(req.Key).Record(req.At, late, Failed)
			o.Progress.Add(1)
			return
		}
		var before any
		if t.Before != nil {
			before = t.Before(f, req)
		}
		v, stale, err := r.Get(ctx, req.Key)
		// Latency is measured from the scheduled start, not the actual one,
		// so a late sender cannot hide waiting (coordinated omission).
		recFor(req.Key).Record(req.At, time.Since(f.Start.Add(req.At)), classify(stale, err))
		if t.Observe != nil {
			t.Observe(f, req, before, v, err)
		}
		o.Progress.Add(1)
	})
	// Let the faults scheduled up to the end of the axis run (a thaw at the
	// very end, say), then stop the goroutine.
	if wait := time.Until(f.Start.Add(t.Duration)); wait > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	cancelFaults()
	fwg.Wait()
	cpu := meter.stop()
	if faultErr != nil && !errors.Is(faultErr, context.Canceled) {
		return res, fmt.Errorf("fault: %w", faultErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	res.Stats = rec.Overall()
	res.Window = rec.Window()
	res.LoaderCalls, res.Window.LoaderCalls = src.Calls()
	res.Series = rec.Seconds(secondsIn(t.Duration))
	for i, c := range src.CallsPerSecond() {
		if i < len(res.Series) {
			res.Series[i].LoaderCalls = c
		}
	}
	for i, a := range addrs {
		role, err := Role(a)
		if err != nil {
			role = "unknown" // down or frozen at the end
		}
		res.Nodes = append(res.Nodes, Node{Addr: a, Role: role, Ops: opsSince(a, ops0[i])})
	}
	res.Extra = r.Stats()
	res.Extra["dropped"] = float64(dropped.Load())
	if t.Aside != nil {
		a, aw := aside.Overall(), aside.Window()
		res.Extra["aside_requests"] = float64(a.Requests)
		res.Extra["aside_errors"] = float64(a.Errors + a.Rejected)
		res.Extra["aside_p50_ms"] = a.P50
		res.Extra["aside_max_ms"] = a.Max
		res.Extra["aside_window_requests"] = float64(aw.Requests)
	}
	cpu.addTo(&res)
	if phased {
		cpu.addPhasesTo(&res, countPhases(t.Schedule, t.Window))
	}
	if t.Extra != nil {
		t.Extra(f, &res)
	}
	return res, nil
}

func runFaults(ctx context.Context, f *Fixture, faults []Fault) error {
	faults = append([]Fault(nil), faults...)
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].At < faults[j].At })
	for _, ft := range faults {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(f.Start.Add(ft.At))):
		}
		if err := ft.Do(ctx, f); err != nil {
			return fmt.Errorf("%s at %v: %w", ft.Name, ft.At, err)
		}
	}
	return nil
}

// opsSince returns the commands the server processed since it reported
// before; a server restarted in between counts from its restart.
func opsSince(addr string, before int64) int64 {
	after, err := CommandsProcessed(addr)
	if err != nil {
		return -1 // not reachable now (killed or frozen at the end)
	}
	if after < before {
		return after
	}
	return after - before
}

func secondsIn(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }
