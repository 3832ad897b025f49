package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The shaping of the grey phase: the drop class, then for each direction
// of the port one filter per dropped IP ID value, none of them 0.
func TestShapingCommandsLoss(t *testing.T) {
	cmds := Shaping{Ports: []int{7000}, Loss: 0.02}.Commands("lo")
	want := [][]string{
		strings.Fields("qdisc add dev lo root handle 1: htb default 1"),
		strings.Fields("class add dev lo parent 1: classid 1:1 htb rate 100gbit"),
		strings.Fields("class add dev lo parent 1: classid 1:4 htb rate 100gbit"),
		strings.Fields("qdisc add dev lo parent 1:4 handle 40: pfifo limit 0"),
	}
	if !reflect.DeepEqual(cmds[:4], want) {
		t.Fatalf("setup commands:\n%q\nwant\n%q", cmds[:4], want)
	}
	filters := cmds[4:]
	if len(filters) != 10 {
		t.Fatalf("%d filters, want 2 directions × 5 IDs: %q", len(filters), filters)
	}
	first := strings.Fields("filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport 7000 0xffff match u16 1 0x00ff at 4 flowid 1:4")
	if !reflect.DeepEqual(filters[0], first) {
		t.Errorf("first filter %q, want %q", filters[0], first)
	}
	var ids []string
	for _, f := range filters {
		s := strings.Join(f, " ")
		if !strings.Contains(s, "sport 7000") && !strings.Contains(s, "dport 7000") {
			t.Errorf("filter not on the port: %s", s)
		}
		if strings.Contains(s, "match u16 0 ") {
			t.Errorf("filter drops IP ID 0 (every SYN-ACK): %s", s)
		}
		if strings.Contains(s, "sport") {
			ids = append(ids, f[len(f)-6])
		}
	}
	if want := []string{"1", "52", "103", "154", "205"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("dropped IP IDs %v, want %v", ids, want)
	}
}

// The partition: every packet to or from each port and the node's own
// source address, no ID match.
func TestShapingCommandsPartition(t *testing.T) {
	cmds := Shaping{Ports: []int{7000, 41000, 17000}, Addrs: []string{"127.0.0.2"}, Partition: true}.Commands("lo")
	filters := cmds[4:]
	if len(filters) != 8 {
		t.Fatalf("%d filters, want (3 ports + 1 address) × 2 directions: %q", len(filters), filters)
	}
	for i, want := range []string{"match ip src 127.0.0.2/32 flowid", "match ip dst 127.0.0.2/32 flowid"} {
		if s := strings.Join(filters[6+i], " "); !strings.Contains(s, want) {
			t.Errorf("address filter %s, want %q", s, want)
		}
	}
	for _, f := range filters {
		if s := strings.Join(f, " "); strings.Contains(s, "u16") || !strings.HasSuffix(s, "flowid 1:4") {
			t.Errorf("partition filter %s", s)
		}
	}
	if got := strings.Join(ClearCommand("lo"), " "); got != "qdisc del dev lo root" {
		t.Errorf("clear command %q", got)
	}
}

// The dropped share is the asked loss to within one value in 256, over
// distinct IDs in 1..255.
func TestShapingLossShare(t *testing.T) {
	for _, loss := range []float64{0, 0.01, 0.02, 0.05, 0.25, 0.5} {
		ids := Shaping{Loss: loss}.lossIDs()
		if got := float64(len(ids)) / 256; got < loss-0.5/256 || got > loss+0.5/256 {
			t.Errorf("loss %v: %d IDs (%v)", loss, len(ids), got)
		}
		seen := map[int]bool{}
		for _, id := range ids {
			if id < 1 || id > 255 || seen[id] {
				t.Errorf("loss %v: ID %d out of 1..255 or repeated in %v", loss, id, ids)
			}
			seen[id] = true
		}
	}
}

func TestGreyPhases(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want greyPhases
	}{
		{greyDuration, greyPhases{5 * time.Second, 25 * time.Second, 35 * time.Second}},
		{8 * time.Second, greyPhases{time.Second, 5 * time.Second, 7 * time.Second}},
		{1500 * time.Millisecond, greyPhases{188 * time.Millisecond, 938 * time.Millisecond, 1313 * time.Millisecond}},
	} {
		if got := greyPhasesFor(c.d); got != c.want {
			t.Errorf("%v: %+v, want %+v", c.d, got, c.want)
		}
	}
}

// A phase's figures go to extra under its prefix; errors include the
// rejected.
func TestAddPhase(t *testing.T) {
	r := NewRecorder(time.Second, 2*time.Second)
	r.Record(500*time.Millisecond, 100*time.Millisecond, Failed) // before the phase
	r.Record(time.Second, 3*time.Millisecond, OK)
	r.Record(1500*time.Millisecond, 40*time.Millisecond, Failed)
	r.Record(1600*time.Millisecond, 5*time.Millisecond, Rejected)
	extra := map[string]float64{}
	addPhase(extra, "grey", r.Window())
	if extra["grey_requests"] != 3 || extra["grey_errors"] != 2 || extra["grey_max_ms"] < 39.9 || extra["grey_max_ms"] > 40.1 {
		t.Errorf("extra %v", extra)
	}
	for _, k := range []string{"grey_p50_ms", "grey_p95_ms", "grey_p99_ms"} {
		if _, ok := extra[k]; !ok {
			t.Errorf("no %s in %v", k, extra)
		}
	}
}

// tc refuses to run outside the lab's own network namespace, so that a
// test or a lab run on the machine's namespace cannot reshape its
// interfaces.
func TestShapeRefusedOutsideOwnNetwork(t *testing.T) {
	t.Setenv(ownNetworkEnv, "")
	if InOwnNetwork() {
		t.Fatal("InOwnNetwork without the marker")
	}
	if err := shape(Shaping{Ports: []int{1}, Partition: true}); err == nil {
		t.Fatal("shape ran outside the lab's own network namespace")
	}
	if err := unshape(); err == nil {
		t.Fatal("unshape ran outside the lab's own network namespace")
	}
	// With the marker but the machine's interfaces in sight, still no.
	if ifs, err := net.Interfaces(); err == nil && len(ifs) > 1 {
		t.Setenv(ownNetworkEnv, "1")
		if InOwnNetwork() {
			t.Fatal("InOwnNetwork with interfaces other than lo")
		}
	}
}

// echoServer answers every line with itself, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// The proxy forwards in order, and with a delay set holds each direction
// for the delay ± the jitter: a round trip takes at least twice the
// smallest.
func TestGreyProxyDelay(t *testing.T) {
	p, err := startGreyProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) time.Duration {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil || got != msg+"\n" {
			t.Fatalf("echo %q, %v; want %q", got, err, msg)
		}
		return time.Since(start)
	}
	roundTrip("warm")
	p.SetDelay(30*time.Millisecond, 10*time.Millisecond)
	for i := range 5 {
		if rtt := roundTrip("delayed"); rtt < 40*time.Millisecond {
			t.Errorf("round trip %d took %v with 30 ± 10 ms each way; want ≥ 40 ms", i, rtt)
		}
	}
	// Many writes back to back come back whole and in order.
	var want strings.Builder
	for i := range 200 {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i%7))
	}
	if rtt := roundTrip(want.String()); rtt < 40*time.Millisecond {
		t.Errorf("long round trip took %v; want ≥ 40 ms", rtt)
	}
	p.SetDelay(0, 0)
	roundTrip("fast again")
}

// grey-node end to end, shortened, in a network namespace of its own: the
// test binary runs again under unshare -n, where TestMain runs
// greyNodeSmokeChild instead of the tests. It fails, never skips, where a
// namespace cannot be made (not root, no unshare, ip or tc;
// scripts/install-test-deps.sh installs them): a skipped run would look
// green and prove nothing of grey nodes.
func TestGreyNodeSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 3+3 Cluster twice")
	}
	if _, err := exec.LookPath("tc"); err != nil {
		t.Fatal("no tc (run scripts/install-test-deps.sh):", err)
	}
	cmd, err := OwnNetworkCommand(nil)
	if err != nil {
		t.Fatal("no network namespace of its own (root, unshare and ip are needed):", err)
	}
	var out strings.Builder
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, &out, &out
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	go func() {
		<-ctx.Done()
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	}()
	err = cmd.Run()
	if err != nil || !strings.Contains(out.String(), greySmokeOK) {
		t.Fatalf("%v:\n%s", err, out.String())
	}
}

// greySmokeOK ends the child's output when every check held.
const greySmokeOK = "grey-node smoke: ok"

// greyNodeSmokeChild is TestGreyNodeSmoke's child, run by TestMain in the
// namespace that test made: it runs grey-node for 5 s a mode, writes what
// is wrong to w, and returns the exit status (0: every check held).
func greyNodeSmokeChild(w io.Writer) int {
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := EnterOwnNetwork(); err != nil {
		fail("%v", err)
	} else if s, ok := Lookup("grey-node"); !ok {
		fail("grey-node not registered")
	} else if rep, err := Run(context.Background(), s, Options{Duration: 5 * time.Second}, Modes); err != nil {
		fail("run: %v", err)
	} else if len(rep.Missing) > 0 {
		fail("modes missing: %v", rep.Missing)
	} else {
		for _, m := range rep.Modes {
			for _, k := range []string{"grey_p99_ms", "grey_errors", "grey_requests", "partition_p99_ms", "partition_errors", "grey_node_keys_p99_ms"} {
				if _, ok := m.Extra[k]; !ok {
					fail("%s: no %s in %v", m.Mode, k, m.Extra)
				}
			}
			// 300 req/s, the grey phase is half of the 5 s.
			if n := m.Extra["grey_requests"]; n < 700 || n > 800 {
				fail("%s: %v requests in the grey phase, want 750", m.Mode, n)
			}
			// Reads of the grey node's keys through its 30 ± 10 ms proxy
			// take at least 40 ms a round trip; the naive mode reads only
			// primaries.
			if m.Mode == "naive" && m.Extra["grey_node_keys_p50_ms"] < 40 {
				fail("naive: grey node's keys p50 %v ms in the grey phase, want ≥ 40", m.Extra["grey_node_keys_p50_ms"])
			}
		}
		if out, err := exec.Command("tc", "qdisc", "show", "dev", "lo").CombinedOutput(); err != nil || strings.Contains(string(out), "htb") {
			fail("lo's shaping left in place after the run: %s %v", out, err)
		}
	}
	for _, p := range problems {
		fmt.Fprintln(w, "grey-node smoke:", p)
	}
	if len(problems) > 0 {
		return 1
	}
	fmt.Fprintln(w, greySmokeOK)
	return 0
}
