package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The environment variables that turn this test binary into the search
// flood's own process (floodMain): catalogd's URL and how many clients.
const (
	envFloodURL     = "HOLDFAST_BENCH_FLOOD_URL"
	envFloodClients = "HOLDFAST_BENCH_FLOOD_CLIENTS"
)

// floodMaxFor bounds the flood process's life if its parent never says stop
// (closes stdin) and never dies.
const floodMaxFor = 5 * time.Minute

func TestMain(m *testing.M) {
	if url := os.Getenv(envFloodURL); url != "" {
		os.Exit(floodMain(url, os.Getenv(envFloodClients)))
	}
	os.Exit(m.Run())
}

// floodTotals is what the flood process prints when it stops.
type floodTotals struct {
	Searches int64   `json:"searches"`
	Rejected int64   `json:"rejected"` // 503s
	Seconds  float64 `json:"seconds"`  // from its first request to stop
	// CPUSeconds is the CPU time the process used meanwhile, user and
	// system.
	CPUSeconds float64 `json:"cpu_seconds"`
}

// searchFlood runs clients that each send unique search prefixes to url
// back to back until done is closed; seq numbers the prefixes, so that no
// two are the same however often the flood starts; the counters count
// every answer and every 503. Its goroutines are done when wg is.
func searchFlood(c *http.Client, url string, clients int, done <-chan struct{}, wg *sync.WaitGroup, seq, searches, rejected *atomic.Int64) {
	for g := range clients {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				code, err := status(c, fmt.Sprintf("%s/v1/search?q=%s", url, uniquePrefix(g, int(seq.Add(1)))))
				searches.Add(1)
				if err == nil && code == http.StatusServiceUnavailable {
					rejected.Add(1)
				}
			}
		})
	}
}

// floodMain is the flood as a process of its own, the way a real flood
// comes from outside catalogd: it prints "ready" once its first search is
// answered, floods until stdin closes (its parent's stop, or its death) or
// floodMaxFor passes, then prints its floodTotals as JSON.
func floodMain(url, clients string) int {
	n, err := strconv.Atoi(clients)
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "flood: %s=%q: want a positive number\n", envFloodClients, clients)
		return 2
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	if _, err := status(c, url+"/v1/search?q=ready"); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	var seq, searches, rejected atomic.Int64
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuTime()
	fmt.Println("ready")
	searchFlood(c, url, n, done, &wg, &seq, &searches, &rejected)
	select {
	case <-done:
	case <-time.After(floodMaxFor):
		fmt.Fprintln(os.Stderr, "flood: never told to stop; stopping after", floodMaxFor)
		return 1
	}
	wg.Wait()
	b, _ := json.Marshal(floodTotals{Searches: searches.Load(), Rejected: rejected.Load(), Seconds: time.Since(start).Seconds(),
		CPUSeconds: (cpuTime() - cpu0).Seconds()})
	fmt.Println(string(b))
	return 0
}

// floodProcess is a running flood process (startFloodProcess).
type floodProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startFloodProcess re-runs this test binary as the flood (floodMain) with
// clients clients against url, and returns once it is flooding.
func startFloodProcess(url string, clients int) (*floodProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envFloodURL+"="+url, envFloodClients+"="+strconv.Itoa(clients))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &floodProcess{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if !p.out.Scan() || p.out.Text() != "ready" {
		p.stdin.Close()
		return nil, errors.Join(fmt.Errorf("flood process did not start: %q", p.out.Text()), cmd.Wait())
	}
	return p, nil
}

// pause stops the process (SIGSTOP): it sends nothing until resume.
func (p *floodProcess) pause() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// resume continues the stopped process (SIGCONT).
func (p *floodProcess) resume() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// stop ends the flood, paused or not, and returns its totals.
func (p *floodProcess) stop() (floodTotals, error) {
	p.resume()
	p.stdin.Close()
	var t floodTotals
	var err error
	if !p.out.Scan() {
		err = errors.New("flood process printed no totals")
	} else {
		err = json.Unmarshal(p.out.Bytes(), &t)
	}
	return t, errors.Join(err, p.cmd.Wait())
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
