package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// TestAccess: a server with a password, an ACL user and TLS answers the
// package's own calls, serves TLS only, and holds the user to its keys.
func TestAccess(t *testing.T) {
	ca, err := NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := Standalone(t, Options{Access: Access{
		Password: "admin-pw",
		Users:    []string{"app on >app-pw ~app:* +@all"},
		TLS:      ca,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// Plain TCP gets no answer a client could read as RESP.
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = c.Write([]byte("PING\r\n"))
		line, _ := bufio.NewReader(c).ReadString('\n')
		_ = c.Close()
		if strings.HasPrefix(line, "+PONG") {
			t.Fatal("a TLS-only server answered PING over plain TCP")
		}
	}

	// Over TLS, as the ACL user: its keys only.
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.Addr(), ca.ClientTLS())
	if err != nil {
		t.Fatalf("TLS dial with the CA: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	for _, tc := range []struct{ cmd, want string }{
		{"AUTH app app-pw\r\n", "+OK"},
		{"SET app:k v\r\n", "+OK"},
		{"SET other:k v\r\n", "-NOPERM"},
	} {
		if _, err := c.Write([]byte(tc.cmd)); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: %v", tc.cmd, err)
		}
		if !strings.HasPrefix(line, tc.want) {
			t.Fatalf("%q answered %q, want %s...", strings.TrimSpace(tc.cmd), strings.TrimSpace(line), tc.want)
		}
	}

	// Without the CA, the handshake fails on the certificate.
	_, err = tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", s.Addr(), &tls.Config{MinVersion: tls.VersionTLS12})
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("TLS dial without the CA: %v, want a certificate error", err)
	}
}
