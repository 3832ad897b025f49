package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/holdfast-dev/holdfast/catalogd/sqlstore"
	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkCatalogdSearchFlood: uncached product reads (an id never read
// before, every 3 ms) while -flood.clients clients send unique search
// prefixes back to back, beside the same reads without the flood, on one
// catalogd handler over SQLite with its default policies, load limit and
// cap on searches in flight; searches take -flood.search-delay longer (a
// catalog larger than the generated one), so the flood holds every
// cache-wide load slot. Every search misses; without a share of load slots
// of its own a product read then finds every slot taken and gets a 503.
// The flood comes from a process of its own over loopback TCP, as a flood
// from outside does (-flood.process=false sends it from goroutines beside
// catalogd instead), at the rate its clients get answers: nothing slows
// or deprioritizes it. The reads come in blocks, quiet and flooded in
// turn (floodBlocks), the flood paused between its blocks. It fails on any
// product read that is not a 200, and reports the product reads' p99 with
// and without the flood and their ratio (scripts/figures.sh requires
// ≤ 2.0). Beside each uncached read it reads a cached product, whose p99
// ratio (cached-p99-ratio) is the control: what the flood costs a request
// that needs no load, no limiter and no database, which is the share of
// the two cores it takes. catalogd-cores is the CPU the benchmark's
// process (catalogd and the product reads, and the flood when it is
// in-process) used over the flooded blocks' wall time, and flood-cores the
// flood process's over the same time, out of 2.
//
//	cd bench && go test -run '^$' -bench CatalogdSearchFlood -benchtime 1x -count 3
func BenchmarkCatalogdSearchFlood(b *testing.B) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.SQLite, filepath.Join(b.TempDir(), sqlstore.FileName), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cache, err := holdfast.New(holdfast.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer cache.Close()
	pol := httpapi.DefaultPolicies()
	for _, p := range []*holdfast.Policy{&pol.Product, &pol.Stock, &pol.List, &pol.Search} {
		p.Hot.TTL = p.TTL // no shared tier, as catalogd/main.go sets it
	}
	loads := &loadTimes{}
	store := slowSearch{Store: db, delay: *floodSearchDelay, loads: loads}
	h, err := httpapi.NewHandler(httpapi.Config{Store: store, Cache: cache, Policies: pol,
		Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), MaxQueriesInFlight: *floodMaxQueries})
	if err != nil {
		b.Fatal(err)
	}
	url, stop := serve(b, h)
	defer stop()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * *floodClients}}
	defer c.CloseIdleConnections()

	next := 2 // the next product id never read; 1 is the cached one
	if code, err := status(c, url+"/v1/products/1"); err != nil || code != http.StatusOK {
		b.Fatalf("product 1: %d %v", code, err)
	}
	// readBlock reads floodBlockReads uncached products, each followed by
	// the cached product 1, one every 3 ms, into r. The cached reads are
	// the control: what the flood costs a request that needs no load, no
	// limiter and no database.
	readBlock := func(r *productTimes) {
		tick := time.NewTicker(floodReadEvery)
		defer tick.Stop()
		for range floodBlockReads {
			<-tick.C
			start := time.Now()
			code, err := status(c, url+"/v1/products/"+strconv.Itoa(next))
			r.uncached = append(r.uncached, time.Since(start))
			next++
			if err != nil || code != http.StatusOK {
				r.bad = append(r.bad, fmt.Sprintf("%d %v", code, err))
			}
			start = time.Now()
			code, err = status(c, url+"/v1/products/1")
			r.cached = append(r.cached, time.Since(start))
			if err != nil || code != http.StatusOK {
				r.bad = append(r.bad, fmt.Sprintf("cached: %d %v", code, err))
			}
		}
	}

	// The flood, paused between its blocks: the process is stopped
	// (SIGSTOP) and continued; the in-process flood is ended and started
	// again. pause returns once the searches it left in flight are done.
	var flood floodSwitch
	if *floodProcessOwn {
		p, err := startFloodProcess(url, *floodClients)
		if err != nil {
			b.Fatal(err)
		}
		flood = p
	} else {
		flood = &inProcessFlood{c: c, url: url, clients: *floodClients}
	}
	if err := flood.pause(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(floodSettle)

	b.ResetTimer()
	var quiet, flooded productTimes
	var floodFor time.Duration // the flooded blocks' wall time
	var catalogdCPU time.Duration
	for i := range floodBlocks {
		if !floodedBlock(i) {
			readBlock(&quiet)
			continue
		}
		if err := flood.resume(); err != nil {
			b.Fatal(err)
		}
		start, cpu0 := time.Now(), cpuTime()
		time.Sleep(floodSettle) // the flood takes the slots first
		loads.flooding.Store(true)
		readBlock(&flooded)
		loads.flooding.Store(false)
		catalogdCPU += cpuTime() - cpu0
		if err := flood.pause(); err != nil {
			b.Fatal(err)
		}
		floodFor += time.Since(start)
		time.Sleep(floodSettle) // its searches in flight finish
	}
	t, err := flood.stop()
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if len(quiet.bad) != 0 {
		b.Fatalf("product reads without a flood failed: %v", quiet.bad[:min(len(quiet.bad), 5)])
	}
	quietP99, floodedP99 := p99(quiet.uncached), p99(flooded.uncached)
	quietLoad, floodedLoad := loads.p99(false), loads.p99(true)
	searchRate := float64(t.Searches) / floodFor.Seconds()

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(quietP99.Microseconds())/1000, "quiet-p99-ms")
	b.ReportMetric(float64(floodedP99.Microseconds())/1000, "flooded-p99-ms")
	b.ReportMetric(float64(floodedP99)/float64(quietP99), "p99-ratio")
	b.ReportMetric(float64(p99(flooded.cached))/float64(p99(quiet.cached)), "cached-p99-ratio")
	b.ReportMetric(float64(quietLoad.Microseconds())/1000, "quiet-load-p99-ms")
	b.ReportMetric(float64(floodedLoad.Microseconds())/1000, "flooded-load-p99-ms")
	b.ReportMetric(searchRate, "searches/s")
	b.ReportMetric(float64(t.Rejected)/float64(max(1, t.Searches)), "search-503-share")
	b.ReportMetric(float64(len(flooded.bad)), "product-failures")
	// The CPU of the benchmark's process is catalogd's and the product
	// reads'; with the flood in-process, the flood's too.
	b.ReportMetric(catalogdCPU.Seconds()/floodFor.Seconds(), "catalogd-cores")
	if *floodProcessOwn {
		// The stopped process uses no CPU: its time is the flooded blocks'.
		b.ReportMetric(t.CPUSeconds/floodFor.Seconds(), "flood-cores")
	}
	b.Logf("uncached product p99 %v quiet, %v under %d clients' flood (%.0f searches/s, %d of %d refused); cached product p99 %v quiet, %v flooded; product loads' p99 %v quiet, %v flooded; %d failed product reads; %d blocks of %d reads each way",
		quietP99, floodedP99, *floodClients, searchRate, t.Rejected, t.Searches, p99(quiet.cached), p99(flooded.cached), quietLoad, floodedLoad,
		len(flooded.bad), floodBlocks/2, floodBlockReads)
	if len(flooded.bad) != 0 {
		b.Fatalf("%d of %d uncached product reads failed under the search flood: %v", len(flooded.bad), len(flooded.uncached), flooded.bad[:min(len(flooded.bad), 5)])
	}
	if t.Rejected == 0 {
		b.Fatal("no search was refused: the flood did not saturate the load slots, so it proves nothing")
	}
}

// The product reads come in floodBlocks blocks of floodBlockReads, quiet
// and flooded in turn (floodedBlock), so that the machine's other load,
// which comes and goes over seconds on a shared machine, falls on both
// alike: the ratio compares the flood with its absence, not one minute's
// neighbours with the next's.
const (
	floodBlocks     = 12
	floodBlockReads = 200
	floodReadEvery  = 3 * time.Millisecond
	// floodSettle is the wait after the flood resumes, before the block's
	// reads, and after it pauses, for its searches in flight to finish
	// (each takes -flood.search-delay and a search past catalogd's cap
	// waits up to 10 ms for a place).
	floodSettle = 100 * time.Millisecond
)

// floodedBlock reports whether block i is flooded: in the order quiet,
// flooded, flooded, quiet, which repeats, each kind comes as often early as
// late in every four blocks, so a steady rise or fall of the machine's
// load over the run favours neither.
func floodedBlock(i int) bool { return i%4 == 1 || i%4 == 2 }

// productTimes is one kind of block's product reads: the uncached and the
// cached reads' latencies and the reads that failed.
type productTimes struct {
	uncached, cached []time.Duration
	bad              []string
}

// p99 sorts d and returns its 99th percentile.
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)*99/100]
}

// floodSwitch is a search flood that can be paused and resumed between the
// benchmark's blocks, then stopped for its totals.
type floodSwitch interface {
	pause() error
	resume() error
	stop() (floodTotals, error)
}

// inProcessFlood is the flood from goroutines of the benchmark's own
// process (-flood.process=false), started anew for each flooded block.
type inProcessFlood struct {
	c                  *http.Client
	url                string
	clients            int
	seq                atomic.Int64 // keeps the prefixes unique across blocks
	searches, rejected atomic.Int64
	done               chan struct{}
	wg                 sync.WaitGroup
}

func (f *inProcessFlood) resume() error {
	f.done = make(chan struct{})
	searchFlood(f.c, f.url, f.clients, f.done, &f.wg, &f.seq, &f.searches, &f.rejected)
	return nil
}

func (f *inProcessFlood) pause() error {
	if f.done != nil {
		close(f.done)
		f.wg.Wait()
		f.done = nil
	}
	return nil
}

func (f *inProcessFlood) stop() (floodTotals, error) {
	err := f.pause()
	return floodTotals{Searches: f.searches.Load(), Rejected: f.rejected.Load()}, err
}

var (
	floodClients     = flag.Int("flood.clients", 32, "clients sending unique search prefixes back to back")
	floodProcessOwn  = flag.Bool("flood.process", true, "send the flood from a process of its own, over loopback TCP, as a flood from outside comes; false: from goroutines of the benchmark's process, beside catalogd")
	floodMaxQueries  = flag.Int("flood.max-queries-in-flight", 0, "catalogd's cap on search requests in flight (httpapi.Config.MaxQueriesInFlight): 0 its default, negative none")
	floodSearchDelay = flag.Duration("flood.search-delay", 20*time.Millisecond, "added to every search query: a search over a catalog larger than the generated one")
)

// slowSearch is a store whose search queries take delay longer, as over a
// catalog much larger than the 10,000 generated products, so that the
// flood holds load slots the way a real one does rather than only
// saturating this machine's two cores.
type slowSearch struct {
	catalog.Store
	delay time.Duration
	loads *loadTimes
}

// Product times the product loads, so that the figures tell the database's
// share of a slow read from the rest.
func (s slowSearch) Product(ctx context.Context, id int64) (catalog.Product, error) {
	start := time.Now()
	p, err := s.Store.Product(ctx, id)
	s.loads.add(time.Since(start))
	return p, err
}

// loadTimes collects product load durations, the flooded blocks' apart
// from the quiet ones'; p99 takes and resets one kind.
type loadTimes struct {
	flooding atomic.Bool // set by the benchmark for its flooded blocks
	mu       sync.Mutex
	d        [2][]time.Duration // quiet, flooded; bounded: one per uncached product read
}

func (l *loadTimes) add(d time.Duration) {
	i := 0
	if l.flooding.Load() {
		i = 1
	}
	l.mu.Lock()
	l.d[i] = append(l.d[i], d)
	l.mu.Unlock()
}

func (l *loadTimes) p99(flooded bool) time.Duration {
	i := 0
	if flooded {
		i = 1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d[i]
	l.d[i] = nil
	return p99(d)
}

func (s slowSearch) Search(ctx context.Context, prefix string, limit int) ([]catalog.Product, error) {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Search(ctx, prefix, limit)
}

// uniquePrefix is a search prefix no other request of the run sends: a
// letter for the client, then i in base 26.
func uniquePrefix(client, i int) string {
	p := []byte{byte('a' + client%26)}
	for {
		p = append(p, byte('a'+i%26))
		i /= 26
		if i == 0 {
			return string(p)
		}
	}
}

// status GETs url and returns the status code, reading the body to the end
// so the connection is reused.
func status(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}
