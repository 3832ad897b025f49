package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// The silent-connection watchdog: a connection with a request outstanding
// and nothing received for 1 s is closed.
//
// rueidis already has ConnWriteTimeout (Options.PingTimeout): a timer per
// connection fires every Dialer.KeepAlive (1 s); if nothing was received
// since the previous firing it sends a PING and closes the connection when
// the PING gets no answer within ConnWriteTimeout. On a connection that
// goes silent under load this takes two to three seconds (one firing that
// still sees the replies from before the freeze, one more to send the PING,
// then the PING's own timeout), and a ctx deadline only releases the caller,
// never the connection. What is missing is a bound on "a request is
// outstanding and nothing has come back": that is what the watchdog adds,
// from outside rueidis, by wrapping the net.Conn that rueidis dials
// (ClientOption.DialCtxFn).
//
// watchedConn numbers every Write (before the bytes go out) and every Read
// that returned bytes (after they came in) from one counter. lastWrite >
// lastRead therefore means bytes were sent after the last byte received: a
// request is outstanding. The watchdog scans the connections every tick; a
// connection found outstanding with the same lastRead for SilentConnTimeout
// is closed, which fails rueidis's pending reads on it at once and makes the
// next request redial. The one case it cannot see is a reply that stops
// half way through a pipeline with no request written after it; under load
// a new request comes within milliseconds, and when idle rueidis's own PING
// finds it.

// watchedConn is a node connection whose traffic the watchdog follows.
type watchedConn struct {
	net.Conn
	node *node

	seq       atomic.Uint64
	lastWrite atomic.Uint64
	lastRead  atomic.Uint64
	gone      atomic.Bool // closed, by anyone, or failed

	watch connWatch // the watchdog's own bookkeeping; only its goroutine touches it
}

func (c *watchedConn) Write(b []byte) (int, error) {
	c.lastWrite.Store(c.seq.Add(1))
	n, err := c.Conn.Write(b)
	if err != nil {
		c.lost()
	}
	return n, err
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(c.seq.Add(1))
	}
	if err != nil && !isTimeout(err) {
		c.lost()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	c.lost()
	return c.Conn.Close()
}

// lost tells the node, once, that this connection is gone: a replica behind
// it may have restarted, so it takes no reads until polled again.
func (c *watchedConn) lost() {
	if c.gone.CompareAndSwap(false, true) {
		c.node.connLost(c)
	}
}

// connWatch is the watchdog's state for one connection.
type connWatch struct {
	armed bool
	since time.Time
	read  uint64
}

// silent reports whether a connection whose counters are lastWrite and
// lastRead has had a request outstanding and received nothing for at least
// timeout. It is called every tick with the current time.
func (w *connWatch) silent(lastWrite, lastRead uint64, now time.Time, timeout time.Duration) bool {
	if lastWrite <= lastRead {
		w.armed = false
		return false
	}
	if !w.armed || w.read != lastRead {
		w.armed, w.since, w.read = true, now, lastRead
		return false
	}
	return now.Sub(w.since) >= timeout
}

// dialNode connects to a Cluster node for one of the node's own clients:
// TCP (or TLS), then, with readonly, AUTH when configured and READONLY, so
// that a replica answers reads of its primary's slots instead of MOVED.
// READONLY is sent on every node's read connections, primaries included (a
// no-op there), so a node that changes role after a failover needs no new
// connection; the node's asPrimary client goes without it. rueidis's own
// handshake (HELLO) follows on the same connection.
func dialNode(ctx context.Context, n *node, addr string, d *net.Dialer, cfg *tls.Config, user, pass string, readonly bool) (net.Conn, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, "tcp", addr)
	} else {
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(d.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if readonly { // without it rueidis's HELLO authenticates on its own
		if err := readonlyHandshake(c, deadline, user, pass); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("redis tier: READONLY on %s: %w", addr, err)
		}
	}
	wc := &watchedConn{Conn: c, node: n}
	if !n.connOpened(wc) {
		_ = c.Close()
		return nil, errNodeClosed
	}
	return wc, nil
}

// readonlyHandshake sends AUTH (when a password is set) and READONLY and
// reads their one-line replies byte by byte, so that nothing of what
// rueidis reads next is consumed here.
func readonlyHandshake(c net.Conn, deadline time.Time, user, pass string) error {
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	var req []byte
	if pass != "" {
		if user != "" {
			req = appendCommand(req, "AUTH", user, pass)
		} else {
			req = appendCommand(req, "AUTH", pass)
		}
	}
	req = appendCommand(req, "READONLY")
	if _, err := c.Write(req); err != nil {
		return err
	}
	if pass != "" {
		line, err := readLine(c)
		if err != nil {
			return err
		}
		if line[0] == '-' {
			return fmt.Errorf("AUTH: %s", line[1:])
		}
	}
	// A READONLY error (a server without Cluster support) is left for the
	// read path to find; the connection is still usable.
	if _, err := readLine(c); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

func appendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

var errBadReply = errors.New("malformed reply")

// errNodeClosed is a dial that ended after its node was closed.
var errNodeClosed = errors.New("redis tier: node closed")

// readLine reads one "\r\n"-terminated simple reply.
func readLine(c net.Conn) (string, error) {
	var line []byte
	one := make([]byte, 1)
	for len(line) < 512 {
		if _, err := c.Read(one); err != nil {
			return "", err
		}
		if one[0] == '\n' {
			if len(line) < 2 || line[len(line)-1] != '\r' {
				return "", errBadReply
			}
			return string(line[:len(line)-1]), nil
		}
		line = append(line, one[0])
	}
	return "", errBadReply
}
