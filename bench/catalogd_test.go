package bench

// BenchmarkCatalogdProductGet compares catalogd's cached GET /v1/products/{id}
// with a trivial net/http handler that writes the same bytes, both over real
// loopback HTTP in the same run, with Zipf-distributed ids (s = 1.1 over the
// 10,000 generated products: a few hot products, a long tail).
//
//	cd bench && go test -run '^$' -bench CatalogdProductGet -benchtime 1x -count 3
//
// It measures saturation throughput: -catalogd.clients goroutines, each with
// a keep-alive connection, send requests back to back for -catalogd.round,
// alternating catalogd and the baseline -catalogd.rounds times each so that
// drift (thermal, noisy neighbours) hits both alike. It reports req/s of
// each and their ratio (the target: ≥ 0.60). The clients run in the
// same process and on the same cores as the servers, so their cost is in
// both figures; the ratio is of whole-system throughput, not of server CPU.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	catalogdClients = flag.Int("catalogd.clients", 32, "concurrent keep-alive clients")
	catalogdRound   = flag.Duration("catalogd.round", time.Second, "length of one measured round")
	catalogdRounds  = flag.Int("catalogd.rounds", 5, "rounds per server, interleaved")
)

// memStore is a catalog.Store over the generated catalog in memory: the
// benchmark measures the cache and HTTP path, and every id is loaded once
// before measuring.
type memStore struct {
	rows []catalog.SeedRow // rows[id-1]
}

func (s *memStore) row(id int64) (catalog.SeedRow, error) {
	if id < 1 || id > int64(len(s.rows)) {
		return catalog.SeedRow{}, catalog.ErrNotFound
	}
	return s.rows[id-1], nil
}

func (s *memStore) Product(_ context.Context, id int64) (catalog.Product, error) {
	r, err := s.row(id)
	return r.Product, err
}

func (s *memStore) Stock(_ context.Context, id int64) (catalog.Stock, error) {
	r, err := s.row(id)
	return r.Stock, err
}

func (s *memStore) Products(context.Context, catalog.ListQuery) (catalog.Page, error) {
	return catalog.Page{}, catalog.ErrInvalid
}

func (s *memStore) Search(context.Context, string, int) ([]catalog.Product, error) {
	return nil, catalog.ErrInvalid
}

func (s *memStore) UpdateProduct(context.Context, int64, int64, catalog.ProductUpdate) (catalog.Product, error) {
	return catalog.Product{}, catalog.ErrInvalid
}

func (s *memStore) Reserve(context.Context, int64, int64) (catalog.Stock, error) {
	return catalog.Stock{}, catalog.ErrInvalid
}

func (s *memStore) Ping(context.Context) error { return nil }
func (s *memStore) Close() error               { return nil }

// serve serves h on a loopback port until the returned stop is called.
func serve(b *testing.B, h http.Handler) (url string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
	}
}

// fetch GETs url and returns the body, failing on anything but a 200.
func fetch(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return body, err
}

// load runs clients back to back against base for d and returns requests
// per second. Each client walks its own Zipf sequence.
func load(b *testing.B, c *http.Client, base string, clients int, d time.Duration) float64 {
	const n = catalog.SeedSize
	urls := make([]string, n+1)
	for id := 1; id <= n; id++ {
		urls[id] = base + "/v1/products/" + strconv.Itoa(id)
	}
	var total atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range clients {
		wg.Go(func() {
			z := rand.NewZipf(rand.New(rand.NewPCG(uint64(g), 7)), 1.1, 1, n-1)
			count := int64(0)
			for ; count&63 != 0 || time.Now().Before(deadline); count++ {
				resp, err := c.Get(urls[z.Uint64()+1])
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Store(err)
					break
				}
			}
			total.Add(count)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return float64(total.Load()) / elapsed.Seconds()
}

// catalogdPair serves catalogd (as catalogd/main.go wires it without Redis,
// over an in-memory store) and the baseline handler, every id warmed, and
// returns their URLs, a client, the Cache, and a function that stops both.
func catalogdPair(b *testing.B, clients int) (catURL, baseURL string, c *http.Client, cache *holdfast.Cache, stop func()) {
	store := &memStore{rows: catalog.Generate(catalog.DefaultSeed, catalog.SeedSize)}
	// As catalogd/main.go wires it without Redis: the exporter as recorder,
	// metrics on, request logging at info (so the debug request log is off).
	cache, err := holdfast.New(holdfast.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	pol := httpapi.DefaultPolicies()
	for _, p := range []*holdfast.Policy{&pol.Product, &pol.Stock, &pol.List, &pol.Search} {
		p.Hot.TTL = p.TTL // no shared tier: the hot tier keeps values to their soft time
	}
	h, err := httpapi.NewHandler(httpapi.Config{Store: store, Cache: cache, Policies: pol,
		Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	catURL, stopCat := serve(b, h)
	c = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}

	// Warm every id and keep its bytes for the baseline. The stock part is
	// refreshed every few seconds during the run; the fake store's answer
	// never changes, so neither do the bytes.
	bodies := make([][]byte, catalog.SeedSize+1)
	for id := 1; id <= catalog.SeedSize; id++ {
		if bodies[id], err = fetch(c, catURL+"/v1/products/"+strconv.Itoa(id)); err != nil {
			b.Fatal(err)
		}
	}
	baseMux := http.NewServeMux()
	baseMux.HandleFunc("GET /v1/products/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil || id < 1 || id >= len(bodies) {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(bodies[id])
	})
	baseURL, stopBase := serve(b, baseMux)
	for _, id := range []int{1, 42, catalog.SeedSize} {
		got, err := fetch(c, baseURL+"/v1/products/"+strconv.Itoa(id))
		if err != nil || !bytes.Equal(got, bodies[id]) {
			b.Fatalf("baseline body for %d differs: %v", id, err)
		}
	}
	return catURL, baseURL, c, cache, func() {
		c.CloseIdleConnections()
		stopBase()
		stopCat()
		cache.Close()
	}
}

func BenchmarkCatalogdProductGet(b *testing.B) {
	clients := *catalogdClients
	catURL, baseURL, c, cache, stop := catalogdPair(b, clients)
	defer stop()

	b.ResetTimer()
	var catRate, baseRate float64
	for range *catalogdRounds {
		catRate += load(b, c, catURL, clients, *catalogdRound)
		baseRate += load(b, c, baseURL, clients, *catalogdRound)
	}
	b.StopTimer()
	rounds := float64(*catalogdRounds)
	b.ReportMetric(0, "ns/op") // one op is the whole comparison; the rates are the result
	b.ReportMetric(catRate/rounds, "catalogd-req/s")
	b.ReportMetric(baseRate/rounds, "baseline-req/s")
	b.ReportMetric(catRate/baseRate, "ratio")
	if s := cache.Stats()[httpapi.NamespaceProduct]; s.Get("overloaded")+s.Get("load.errors") > 0 {
		b.Errorf("product namespace: %d overloaded, %d load errors", s.Get("overloaded"), s.Get("load.errors"))
	}
}

var (
	openStart = flag.Float64("catalogd.open-start", 5000, "first offered rate of the open-model ramp, req/s")
	openStep  = flag.Float64("catalogd.open-step", 1.15, "factor between the ramp's rates")
	openP99   = flag.Duration("catalogd.open-p99", 50*time.Millisecond, "p99 latency, from each request's scheduled start, a rate must keep to count as sustained")
)

// BenchmarkCatalogdProductGetOpen is the same comparison under a
// constant-rate (open-model) load, as the target is stated: requests are sent
// at fixed times whether or not earlier ones have answered, and latency
// counts from the scheduled time, so a server that falls behind shows it. The
// rate climbs by -catalogd.open-step each second, catalogd and the baseline
// alternating at each rate; a rate is sustained when no request had to be
// dropped (all 128 workers busy and 4,096 waiting) and p99 stays within
// -catalogd.open-p99, in one of two tries. The generator runs in the same
// process, on the same two cores, so both figures include its cost. It
// reports the highest sustained rate of each and the ratio (target: ≥ 0.60).
//
//	cd bench && go test -run '^$' -bench CatalogdProductGetOpen -benchtime 1x -count 3
func BenchmarkCatalogdProductGetOpen(b *testing.B) {
	const workers = 128
	catURL, baseURL, c, _, stop := catalogdPair(b, workers)
	defer stop()
	b.ResetTimer()
	var best [2]float64 // catalogd, baseline
	failed := [2]bool{}
	for rate := *openStart; !failed[0] || !failed[1]; rate *= *openStep {
		for i, url := range []string{catURL, baseURL} {
			if failed[i] {
				continue
			}
			// A rate fails after two tries in a row: one bad second on
			// a shared machine does not end a ramp.
			ok := false
			for try := 0; try < 2 && !ok; try++ {
				p99, dropped, err := openLoad(c, url, rate, time.Second, workers)
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("%s at %.0f req/s: p99 %v, dropped %d", []string{"catalogd", "baseline"}[i], rate, p99.Round(10*time.Microsecond), dropped)
				ok = dropped == 0 && p99 <= *openP99
			}
			if !ok {
				failed[i] = true
				continue
			}
			best[i] = rate
		}
		if rate > 1e6 {
			b.Fatal("no rate failed below 1,000,000 req/s: the criterion measures nothing")
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(best[0], "catalogd-sustained-req/s")
	b.ReportMetric(best[1], "baseline-sustained-req/s")
	if best[1] > 0 {
		b.ReportMetric(best[0]/best[1], "ratio")
	}
}

// openLoad offers rate req/s of Zipf ids to base for d from workers
// goroutines and returns the p99 latency from scheduled start and how many
// requests were dropped because the queue was full.
func openLoad(c *http.Client, base string, rate float64, d time.Duration, workers int) (p99 time.Duration, dropped int, err error) {
	const n = catalog.SeedSize
	urls := make([]string, n+1)
	for id := 1; id <= n; id++ {
		urls[id] = base + "/v1/products/" + strconv.Itoa(id)
	}
	type job struct {
		at  time.Time
		url string
	}
	jobs := make(chan job, 4096)
	lats := make([][]time.Duration, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for j := range jobs {
				resp, err := c.Get(j.url)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("GET %s: status %d", j.url, resp.StatusCode)
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				lats[w] = append(lats[w], time.Since(j.at))
			}
		})
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(uint64(rate), 7)), 1.1, 1, n-1)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	total := int(float64(d) / float64(interval))
	for sent := 0; sent < total; {
		now := time.Now()
		for ; sent < total && start.Add(time.Duration(sent)*interval).Before(now); sent++ {
			select {
			case jobs <- job{start.Add(time.Duration(sent) * interval), urls[z.Uint64()+1]}:
			default:
				dropped++
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	close(jobs)
	wg.Wait()
	select {
	case err = <-errs:
		return 0, dropped, err
	default:
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return 0, dropped, errors.New("no request answered")
	}
	slices.Sort(all)
	return all[len(all)*99/100], dropped, nil
}
