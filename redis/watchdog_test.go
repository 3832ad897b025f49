package redis

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/internal/fakeclock"
)

// TestWatchSilent: a connection is silent only when a write is outstanding
// and no byte has come back for the whole timeout; any read re-arms it.
func TestWatchSilent(t *testing.T) {
	clk := fakeclock.New(time.Unix(1_700_000_000, 0))
	const timeout = time.Second
	var w connWatch
	check := func(lastWrite, lastRead uint64) bool { return w.silent(lastWrite, lastRead, clk.Now(), timeout) }
	if check(4, 5) {
		t.Fatal("idle connection (nothing outstanding) called silent")
	}
	if check(6, 5) { // a request went out: armed now
		t.Fatal("silent at once")
	}
	clk.Advance(900 * time.Millisecond)
	if check(8, 5) {
		t.Fatal("silent before the timeout")
	}
	clk.Advance(50 * time.Millisecond)
	if check(9, 7) { // a reply came in: the clock starts again
		t.Fatal("silent although a reply arrived")
	}
	clk.Advance(999 * time.Millisecond)
	if check(9, 7) {
		t.Fatal("silent 999 ms after the last reply")
	}
	clk.Advance(time.Millisecond)
	if !check(9, 7) {
		t.Fatal("not silent after 1 s without a reply")
	}
	if check(9, 10) || check(11, 10) {
		t.Fatal("answered connection still silent")
	}
}

// TestReadonlyHandshake: AUTH then READONLY go out as RESP, their replies
// are consumed exactly, and nothing after them is read.
func TestReadonlyHandshake(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	done := make(chan string, 1)
	go func() {
		defer server.Close()
		r := bufio.NewReader(server)
		var got []string
		for i := 0; i < 2; i++ {
			line, _ := r.ReadString('\n')
			n := int(line[1] - '0')
			parts := []string{}
			for j := 0; j < n; j++ {
				_, _ = r.ReadString('\n')
				arg, _ := r.ReadString('\n')
				parts = append(parts, strings.TrimSpace(arg))
			}
			got = append(got, strings.Join(parts, " "))
		}
		_, _ = server.Write([]byte("+OK\r\n+OK\r\n+NEXT\r\n"))
		done <- strings.Join(got, "|")
	}()
	if err := readonlyHandshake(client, time.Now().Add(2*time.Second), "u", "p"); err != nil {
		t.Fatal(err)
	}
	line, err := readLine(client)
	if err != nil || line != "+NEXT" {
		t.Fatalf("the handshake consumed what followed: %q, %v", line, err)
	}
	if got := <-done; got != "AUTH u p|READONLY" {
		t.Fatalf("sent %q", got)
	}
}
