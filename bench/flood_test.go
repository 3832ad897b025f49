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
// or deprioritizes it. It fails on any product read that is not a 200,
// and reports the product reads' p99 with and without the flood and their
// ratio (scripts/figures.sh requires ≤ 2.0). Beside each uncached read it
// reads a cached product, whose p99 ratio (cached-p99-ratio) is the
// control: what the flood costs a request that needs no load, no limiter
// and no database, which is the share of the two cores it takes. With the
// flood in its own process, catalogd-cores is the CPU the benchmark's
// process (catalogd and the product reads) used over the flooded phase's
// wall time, and flood-cores the flood process's over its own, out of 2.
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

	const reads, every = 1000, 3 * time.Millisecond
	next := 2 // the next product id never read; 1 is the cached one
	if code, err := status(c, url+"/v1/products/1"); err != nil || code != http.StatusOK {
		b.Fatalf("product 1: %d %v", code, err)
	}
	// productReads reads an uncached product, then the cached product 1,
	// every 3 ms; the cached reads are the control: what the flood costs
	// a request that needs no load, no limiter and no database.
	productReads := func() (p99, cachedP99 time.Duration, bad []string) {
		lat := make([]time.Duration, 0, reads)
		cached := make([]time.Duration, 0, reads)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range reads {
			<-tick.C
			start := time.Now()
			code, err := status(c, url+"/v1/products/"+strconv.Itoa(next))
			lat = append(lat, time.Since(start))
			next++
			if err != nil || code != http.StatusOK {
				bad = append(bad, fmt.Sprintf("%d %v", code, err))
			}
			start = time.Now()
			code, err = status(c, url+"/v1/products/1")
			cached = append(cached, time.Since(start))
			if err != nil || code != http.StatusOK {
				bad = append(bad, fmt.Sprintf("cached: %d %v", code, err))
			}
		}
		slices.Sort(lat)
		slices.Sort(cached)
		return lat[len(lat)*99/100], cached[len(cached)*99/100], bad
	}

	b.ResetTimer()
	quiet, quietCached, bad := productReads()
	quietLoad := loads.p99()
	if len(bad) != 0 {
		b.Fatalf("product reads without a flood failed: %v", bad[:min(len(bad), 5)])
	}

	var searches, rejected atomic.Int64
	var floodFor time.Duration
	var flooded, floodedCached time.Duration
	var catalogdCores, floodCores float64 // CPU over wall time while flooded; the flood's own only when it is a process
	if *floodProcessOwn {
		p, err := startFloodProcess(url, *floodClients)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the flood takes the slots first
		cpu0, start := cpuTime(), time.Now()
		flooded, floodedCached, bad = productReads()
		catalogdCores = (cpuTime() - cpu0).Seconds() / time.Since(start).Seconds()
		t, err := p.stop()
		if err != nil {
			b.Fatal(err)
		}
		searches.Store(t.Searches)
		rejected.Store(t.Rejected)
		floodFor = time.Duration(t.Seconds * float64(time.Second))
		floodCores = t.CPUSeconds / t.Seconds
	} else {
		done := make(chan struct{})
		var wg sync.WaitGroup
		searchFlood(c, url, *floodClients, done, &wg, &searches, &rejected)
		time.Sleep(200 * time.Millisecond) // the flood takes the slots first
		floodStart := time.Now()
		flooded, floodedCached, bad = productReads()
		floodFor = time.Since(floodStart)
		close(done)
		wg.Wait()
	}
	floodedLoad := loads.p99()
	b.StopTimer()

	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(quiet.Microseconds())/1000, "quiet-p99-ms")
	b.ReportMetric(float64(flooded.Microseconds())/1000, "flooded-p99-ms")
	b.ReportMetric(float64(flooded)/float64(quiet), "p99-ratio")
	b.ReportMetric(float64(floodedCached)/float64(quietCached), "cached-p99-ratio")
	b.ReportMetric(float64(quietLoad.Microseconds())/1000, "quiet-load-p99-ms")
	b.ReportMetric(float64(floodedLoad.Microseconds())/1000, "flooded-load-p99-ms")
	b.ReportMetric(float64(searches.Load())/floodFor.Seconds(), "searches/s")
	b.ReportMetric(float64(rejected.Load())/float64(max(1, searches.Load())), "search-503-share")
	b.ReportMetric(float64(len(bad)), "product-failures")
	if *floodProcessOwn {
		b.ReportMetric(catalogdCores, "catalogd-cores")
		b.ReportMetric(floodCores, "flood-cores")
	}
	b.Logf("uncached product p99 %v quiet, %v under %d clients' flood (%.0f searches/s, %d of %d refused); cached product p99 %v quiet, %v flooded; product loads' p99 %v quiet, %v flooded; %d failed product reads",
		quiet, flooded, *floodClients, float64(searches.Load())/floodFor.Seconds(), rejected.Load(), searches.Load(), quietCached, floodedCached, quietLoad, floodedLoad, len(bad))
	if len(bad) != 0 {
		b.Fatalf("%d of %d uncached product reads failed under the search flood: %v", len(bad), reads, bad[:min(len(bad), 5)])
	}
	if rejected.Load() == 0 {
		b.Fatal("no search was refused: the flood did not saturate the load slots, so it proves nothing")
	}
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

// loadTimes collects product load durations; p99 takes and resets them.
type loadTimes struct {
	mu sync.Mutex
	d  []time.Duration // bounded: one per uncached product read
}

func (l *loadTimes) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *loadTimes) p99() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.d
	l.d = nil
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)*99/100]
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
