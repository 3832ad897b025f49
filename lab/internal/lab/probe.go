package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// The lab's own probes of its redis-server processes (which it starts with
// internal/redistest's Launch), over a fresh connection each, outside the
// client under test.

// Command sends one command over a fresh connection and returns the reply as
// text: the lab's own probes (PING, INFO, CLUSTER INFO) must not go through
// the client under test, and a frozen server must not hang them.
func Command(addr string, timeout time.Duration, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

// readReply reads one RESP2 reply: simple string, error, integer or bulk
// string; arrays are joined by newlines (enough for the probes).
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 || n > 1<<16 {
			return "", fmt.Errorf("bad array reply %q", line)
		}
		parts := make([]string, 0, n)
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// InfoField returns one field of INFO section from addr.
func InfoField(addr, section, field string) (string, error) {
	info, err := Command(addr, 300*time.Millisecond, "INFO", section)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s of %s has no %s", section, addr, field)
}

// CommandsProcessed returns total_commands_processed of the server at addr.
func CommandsProcessed(addr string) (int64, error) {
	v, err := InfoField(addr, "stats", "total_commands_processed")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
