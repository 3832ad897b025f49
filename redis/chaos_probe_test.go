package redis_test

import (
	"bufio"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/tier"
)

// When a read looks stale as it returns (a superseded version after its
// invalidation returned), the chaos test asks every node at once, with a
// plain RESP connection (READONLY on replicas), which copies of the key it
// holds and at which version: that tells a replica that lags from a copy
// or a primary that kept the old value. The answer goes into the failure
// message; whether the read is a violation is still decided after the run.

// chaosProbes runs at most chaosMaxProbes probes, one at a time.
type chaosProbes struct {
	addrs func() []string
	mu    sync.Mutex
	busy  bool
	n     int
	out   map[chaosProbeKey]string
	wg    sync.WaitGroup
}

type chaosProbeKey struct {
	proc  uint8
	key   uint16
	begin int64
}

const chaosMaxProbes = 20

func newChaosProbes(addrs func() []string) *chaosProbes {
	return &chaosProbes{addrs: addrs, out: map[chaosProbeKey]string{}}
}

// suspect probes r's key if r returned a superseded version whose
// invalidation had returned (and, outside the writer's process, had not
// been queued) more than slack before the read began.
func (p *chaosProbes) suspect(db *chaosDB, r *chaosRead, writer int) {
	if r.errKind != chaosOK {
		return
	}
	db.mu.Lock()
	cv := db.keys[r.key].vers[r.ver]
	db.mu.Unlock()
	if cv.invReturn == 0 {
		return
	}
	// Since when the old version should be gone: the invalidation's
	// return, or, for one queued for replay, when the writer saw the
	// replay queue drained (landAll).
	since, slack := cv.invReturn, int64(0)
	if int(r.proc) != writer {
		if r.src != holdfast.SourceShared || r.why != 0 {
			return
		}
		if cv.queued {
			if cv.landed == 0 {
				return
			}
			since = cv.landed
		}
		slack = int64(chaosReplicaSlack)
	}
	if r.begin <= since+slack {
		return
	}
	p.mu.Lock()
	if p.busy || p.n >= chaosMaxProbes {
		p.mu.Unlock()
		return
	}
	p.busy = true
	p.n++
	p.mu.Unlock()
	k := chaosProbeKey{r.proc, r.key, r.begin}
	name := chaosKeyName(int(r.key))
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		res := probeKey(p.addrs(), name)
		p.mu.Lock()
		p.out[k] = res
		p.busy = false
		p.mu.Unlock()
	}()
}

func (p *chaosProbes) wait() { p.wg.Wait() }

func (p *chaosProbes) result(r *chaosRead) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out[chaosProbeKey{r.proc, r.key, r.begin}]
}

// probeKey asks every node, concurrently, for every key ending in the
// key's full name (the key and its smeared copies) and their versions.
func probeKey(addrs []string, key string) string {
	at := time.Now()
	full := "chaos:chaos:" + key
	res := make([]string, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = a + " " + probeNode(a, full)
		}()
	}
	wg.Wait()
	sort.Strings(res)
	return fmt.Sprintf("probe %v after the read: %s", time.Since(at).Round(time.Millisecond), strings.Join(res, "; "))
}

func probeNode(addr, full string) string {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err != nil {
		return "unreachable"
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	rw := bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c))
	cmd := func(args ...string) (any, error) {
		fmt.Fprintf(rw, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(rw, "$%d\r\n%s\r\n", len(a), a)
		}
		if err := rw.Flush(); err != nil {
			return nil, err
		}
		return readRESP(rw.Reader)
	}
	role := "?"
	if v, err := cmd("ROLE"); err == nil {
		if arr, ok := v.([]any); ok && len(arr) > 0 {
			role, _ = arr[0].(string)
		}
	}
	if _, err := cmd("READONLY"); err != nil {
		return "(" + role + ") " + err.Error()
	}
	var keys []string
	cursor := "0"
	for i := 0; i < 100; i++ {
		v, err := cmd("SCAN", cursor, "MATCH", "*"+full, "COUNT", "100000")
		if err != nil {
			return "(" + role + ") SCAN: " + err.Error()
		}
		arr, _ := v.([]any)
		if len(arr) != 2 {
			break
		}
		cursor, _ = arr[0].(string)
		ks, _ := arr[1].([]any)
		for _, k := range ks {
			if s, ok := k.(string); ok && strings.HasSuffix(s, full) {
				keys = append(keys, s)
			}
		}
		if cursor == "0" {
			break
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		v, err := cmd("GET", k)
		desc := k + "="
		switch b, ok := v.(string); {
		case err != nil:
			desc += err.Error()
		case !ok:
			desc += "nil"
		default:
			e, err := tier.DecodeEntry([]byte(b))
			if err != nil {
				desc += "undecodable"
				break
			}
			if _, ver, ok := parseChaosValue(e.Value); ok {
				desc += "v" + strconv.FormatUint(ver, 10)
			} else {
				desc += "?"
			}
		}
		parts = append(parts, desc)
	}
	if len(parts) == 0 {
		parts = []string{"no copy"}
	}
	return "(" + role + ") " + strings.Join(parts, ", ")
}

// readRESP reads one RESP2 reply: strings as string, integers as int64,
// arrays as []any, nil as nil, errors as error.
func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("%s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := readFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
