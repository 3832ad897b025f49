package lab

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// greyProxy forwards TCP connections to one address and, while its delay is
// set, holds every chunk it reads for that delay, plus or minus a uniform
// jitter, in each direction: what netem's "delay D J" does to a link,
// without netem, which the lab's kernel lacks. Order is kept (a chunk never
// passes the one before it), as TCP would restore it anyway.
type greyProxy struct {
	ln     net.Listener
	target string

	delay, jitter atomic.Int64 // nanoseconds; delay 0: pass at once

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // accept loop and pumps
}

// startGreyProxy listens on a free loopback port and forwards to target.
func startGreyProxy(target string) (*greyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &greyProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *greyProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay and jitter of every chunk from now on; 0, 0 ends
// them.
func (p *greyProxy) SetDelay(delay, jitter time.Duration) {
	p.jitter.Store(int64(jitter))
	p.delay.Store(int64(delay))
}

func (p *greyProxy) hold() time.Duration {
	d, j := p.delay.Load(), p.jitter.Load()
	if d == 0 {
		return 0
	}
	if j > 0 {
		d += rand.Int64N(2*j+1) - j
	}
	return time.Duration(max(d, 0))
}

func (p *greyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go p.pump(s, c)
		go p.pump(c, s)
	}
}

// track registers both ends so that Close can close them; false once the
// proxy is closed.
func (p *greyProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

type chunk struct {
	b  []byte
	at time.Time // when it may be written
}

// pump copies from src to dst, each chunk held until its time. The reader
// side stamps and queues; the writer side waits and writes, so that a held
// chunk does not stop the next from being read. When either side fails,
// both connections close, as a forwarder's would.
func (p *greyProxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if w := time.Until(c.at); w > 0 {
				time.Sleep(w)
			}
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
		for range q { // let the reader finish
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			at := time.Now().Add(p.hold())
			if at.Before(last) {
				at = last
			}
			last = at
			q <- chunk{b: append([]byte(nil), buf[:n]...), at: at}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// Close stops accepting, closes every connection and waits for the
// goroutines.
func (p *greyProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
