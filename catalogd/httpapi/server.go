package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server timeouts. They bound what a slow or idle client can hold: a
// connection that sends headers slowly (Slowloris), a body that never ends,
// a reader that never drains the response.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second  // whole request, body included (64 KiB at most)
	WriteTimeout      = 60 * time.Second  // long enough for a 30 s CPU profile on the admin listener
	IdleTimeout       = 120 * time.Second // keep-alive connections between requests
	MaxHeaderBytes    = 64 << 10
)

// Server is an HTTP server on one listener with the timeouts above. Open
// starts it; Close drains it.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed when Serve has returned
	err  error         // Serve's error, other than ErrServerClosed; read after done
}

// NewServer returns a Server for h. log receives the server's own errors
// (TLS handshakes, panics in handlers).
func NewServer(h http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
}

// Open listens on addr (":8080", "127.0.0.1:0") and serves on a goroutine
// that Close stops and waits for.
func (s *Server) Open(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("catalogd http: listen %s: %w", addr, err)
	}
	s.ln = ln
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return nil
}

// Addr is the address the server listens on, with the port chosen when
// Open was given port 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// URL is "http://" plus Addr, for logs and tests.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops accepting connections and waits for in-flight requests to
// finish, until ctx ends; then it closes the connections still open. It
// returns ctx's error if requests had to be cut off.
func (s *Server) Close(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		// Draining ran out of time: cut the rest off so Serve returns.
		s.srv.Close()
	}
	<-s.done
	return errors.Join(err, s.err)
}
