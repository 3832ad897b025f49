package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/redistest"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds catalogd once per test binary, into a temporary directory
// removed when the tests end (see TestMain).
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "catalogd-test-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		binPath = filepath.Join(dir, "catalogd")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = &buildError{err, string(out)}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

var binDir string

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is a running catalogd.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	start  time.Time
	url    chan string // the "catalogd serving" URL, once
	logs   chan string // all of stderr, once it is closed
	exited bool
}

// startBinary starts catalogd with args and extra environment variables.
// A reader goroutine owns stderr until the process closes it at exit.
func startBinary(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(binary(t), args...), url: make(chan string, 1), logs: make(chan string, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.exited {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	go func() {
		var all strings.Builder
		re := regexp.MustCompile(`msg="catalogd serving" url=(http://127\.0\.0\.1:\d+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				p.url <- m[1]
			}
		}
		io.Copy(io.Discard, stderr)
		p.logs <- all.String()
	}()
	return p
}

// ready waits for the serving line and then for a 200 from /readyz, and
// returns the base URL and the time since the process started.
func (p *proc) ready(within time.Duration) (string, time.Duration) {
	p.t.Helper()
	var url string
	select {
	case url = <-p.url:
	case <-time.After(within):
		p.t.Fatalf("no \"catalogd serving\" line within %v", within)
	}
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url, time.Since(p.start)
			}
		}
		if time.Since(p.start) > within {
			p.t.Fatalf("/readyz not 200 within %v (last: %v)", within, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for the process to exit and returns its log and exit error.
func (p *proc) wait(within time.Duration) (string, error) {
	p.t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		p.exited = true
		return <-p.logs, err
	case <-time.After(within):
		p.t.Fatalf("no exit within %v", within)
		return "", nil
	}
}

// stop sends SIGTERM and checks for a clean exit.
func (p *proc) stop() string {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	logs, err := p.wait(20 * time.Second)
	if err != nil {
		p.t.Errorf("exit after SIGTERM: %v\n%s", err, logs)
	}
	for _, want := range []string{"catalogd shutting down", "catalogd stopped"} {
		if !strings.Contains(logs, want) {
			p.t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	return logs
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestBinaryServesAndStops starts catalogd on a free loopback port with an
// empty data directory (given through the environment) and checks that it
// answers /readyz within 10 s of starting, seeding included, serves a
// product and its metrics, and exits 0 on SIGTERM.
func TestBinaryServesAndStops(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startBinary(t, []string{"-addr", "127.0.0.1:0"}, "CATALOGD_DATA_DIR="+dataDir, "CATALOGD_REDIS=")
	url, took := p.ready(10 * time.Second)
	t.Logf("ready %v after start (fresh data dir, 10,000 products seeded)", took.Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(dataDir, "catalog.db")); err != nil {
		t.Errorf("CATALOGD_DATA_DIR not used: %v", err)
	}

	resp, _ := get(t, url+"/v1/products/10000")
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Status") == "" {
		t.Errorf("GET product: %d, Cache-Status %q", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	_, metrics := get(t, url+"/metrics")
	for _, want := range []string{
		`holdfast_loads_total{namespace="product"} 1`,
		`catalogd_http_requests_total{code="200",route="GET /v1/products/{id}"} 1`,
		`catalogd_db_pool_max_open_connections{pool="write"} 1`,
		`go_goroutines `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if resp, _ := get(t, url+"/debug/pprof/"); resp.StatusCode != 404 {
		t.Errorf("pprof served without -pprof: %d", resp.StatusCode)
	}
	if logs := p.stop(); !strings.Contains(logs, "in-process tiers only") {
		t.Errorf("no word of running without Redis:\n%s", logs)
	}
}

// TestBinaryWithRedis runs catalogd with -redis on a real redis-server and
// -pprof: it reports Redis in /readyz, serves the second read from Redis
// and, once the product is hot, from its hot tier, serves the profiles, and
// still exits cleanly.
func TestBinaryWithRedis(t *testing.T) {
	binary(t) // skip in -short before starting Redis
	redistest.Require(t)
	r := redistest.Standalone(t)
	p := startBinary(t, []string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir(), "-redis", r.Addr(), "-pprof"})
	url, _ := p.ready(10 * time.Second)
	if resp, body := get(t, url+"/readyz"); !strings.Contains(body, `"redis":{"status":"ok","required":false}`) {
		t.Errorf("readyz: %d %s", resp.StatusCode, body)
	}
	get(t, url+"/v1/products/7")
	// The first read's readers are answered before its write to Redis
	// ends, and a read that comes meanwhile joins that load (collapsed);
	// the first read after it is served by Redis.
	var status string
	for i := 0; i < 200; i++ {
		resp, _ := get(t, url+"/v1/products/7")
		if status = resp.Header.Get("Cache-Status"); !strings.Contains(status, "collapsed") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.HasPrefix(status, "holdfast; hit; detail=shared") {
		t.Errorf("read after the load: %q, want Redis (only hot keys stay in process)", status)
	}
	// Read often enough (the default threshold is 1,000 reads a minute),
	// the product turns hot and is served from process memory.
	hot := 0
	for i := 0; i < 500 && hot == 0; i++ {
		if resp, _ := get(t, url+"/v1/products/7"); strings.HasPrefix(resp.Header.Get("Cache-Status"), "holdfast; hit; detail=hot") {
			hot = i + 3
		}
	}
	if hot == 0 {
		t.Error("product 7 never served from the hot tier in 500 reads")
	}
	t.Logf("served from the hot tier from read %d on", hot)
	if resp, _ := get(t, url+"/debug/pprof/"); resp.StatusCode != 200 {
		t.Errorf("pprof with -pprof: %d", resp.StatusCode)
	}
	if logs := p.stop(); !strings.Contains(logs, "shared tier: Redis") {
		t.Errorf("no word of Redis:\n%s", logs)
	}
}

// TestBinaryRedisUnreachable: with -redis set and no Redis answering,
// catalogd starts anyway (a restart during a Redis outage must not take the
// service down with it), serves from its own tiers and the database, and
// reports Redis as down on /readyz while staying ready.
func TestBinaryRedisUnreachable(t *testing.T) {
	p := startBinary(t, []string{"-addr", "127.0.0.1:0", "-data-dir", t.TempDir(), "-redis", "127.0.0.1:1"})
	base, _ := p.ready(20 * time.Second)
	resp, err := http.Get(base + "/v1/products/42")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET product with Redis down: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "redis") {
		t.Fatalf("readyz with Redis down: %d %s", resp.StatusCode, body)
	}
	if logs := p.stop(); !strings.Contains(logs, "Redis not reachable yet") {
		t.Errorf("no warning that Redis is unreachable in the log:\n%s", logs)
	}
}

// TestParseFlags: a flag wins over its environment variable, a variable
// fills in a flag not given, and bad values are errors.
func TestParseFlags(t *testing.T) {
	t.Setenv("CATALOGD_ADDR", ":9999")
	t.Setenv("CATALOGD_STOCK_TTL", "7s")
	t.Setenv("CATALOGD_MAX_LOADS", "1")
	m := NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"-addr", "127.0.0.1:0", "-stock-soft-ttl", "2s"}); err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if c.Addr != "127.0.0.1:0" || c.Policies.Stock.TTL != 7*time.Second || c.Policies.Stock.SoftTTL != 2*time.Second || c.MaxLoads != 1 {
		t.Errorf("config %+v", c)
	}
	if c.Policies.Product.TTL != 30*time.Minute || c.HotTTL != 10*time.Second {
		t.Errorf("defaults lost: %+v", c)
	}

	t.Setenv("CATALOGD_STOCK_TTL", "soon")
	if err := newQuietMain().ParseFlags(nil); err == nil || !strings.Contains(err.Error(), "CATALOGD_STOCK_TTL") {
		t.Errorf("bad env value: %v", err)
	}
	t.Setenv("CATALOGD_STOCK_TTL", "")
	os.Unsetenv("CATALOGD_STOCK_TTL")
	for _, args := range [][]string{{"-nope"}, {"extra"}, {"-log-format", "xml"}, {"-log-level", "loud"}} {
		if err := newQuietMain().ParseFlags(args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func newQuietMain() *Main {
	m := NewMain()
	m.Stderr = io.Discard
	return m
}
