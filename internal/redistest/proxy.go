package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port of its own to a
// server, so that a test can take one client's path to the server away
// while the server, and every other client, runs on: Cut closes the
// listener and every connection (to the client the server is gone: its
// connections reset, new ones refused), Heal listens again on the same
// port.
type Proxy struct {
	to   string
	addr string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy starts a proxy to the server at to, closed when the test ends.
func NewProxy(t testing.TB, to string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{to: to, addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.accept(ln) })
	t.Cleanup(p.Cut)
	return p
}

// Addr returns the address clients dial instead of the server's.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.to, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln { // cut meanwhile
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		for _, pair := range [][2]net.Conn{{c, s}, {s, c}} {
			p.wg.Go(func() {
				io.Copy(pair[0], pair[1])
				pair[0].Close()
				pair[1].Close()
				p.mu.Lock()
				delete(p.conns, pair[0])
				p.mu.Unlock()
			})
		}
	}
}

// Cut closes the listener and every connection, and waits for the
// proxy's goroutines. Cutting a cut proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Heal listens again on the proxy's port, retrying for up to 5 s should
// another process have taken it meanwhile.
func (p *Proxy) Heal() error {
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
	return nil
}
