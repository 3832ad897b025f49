package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
)

// cutBodyServer serves a Handler over the fake store on a loopback port
// with the given read timeout, logging to a sink.
func cutBodyServer(t *testing.T, readTimeout time.Duration) (addr string, store *fakeStore, logs *logSink) {
	t.Helper()
	cache, err := holdfast.New(holdfast.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cache.Close() })
	store, logs = newFakeStore(), &logSink{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	h, err := httpapi.NewHandler(httpapi.Config{Store: store, Cache: cache, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadTimeout: readTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String(), store, logs
}

// partialBody is a reservation whose Content-Length promises more than the
// bytes that follow it.
const partialBody = "Content-Length: 100\r\n\r\n" + `{"quantity":`

// sendPartial sends a reservation with the given framing and body, then
// calls finish on the connection and reads the answer.
func sendPartial(t *testing.T, addr, body string, finish func(*net.TCPConn)) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/products/1/reserve HTTP/1.1\r\nHost: catalogd\r\nContent-Type: application/json\r\n"+body)
	finish(c.(*net.TCPConn))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func wantBodyError(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != status || body.Error.Code != code {
		t.Errorf("status %d, code %q (%v); want %d %s", resp.StatusCode, body.Error.Code, err, status, code)
	}
}

// TestBodyCutShort: a client that stops sending in the middle of a body
// (here it shuts its side of the connection, so that it can still read the
// answer) is a client that left: 499 as for any such request, not a 500,
// and no error is logged; nothing is reserved.
func TestBodyCutShort(t *testing.T) {
	addr, store, logs := cutBodyServer(t, time.Minute)
	resp := sendPartial(t, addr, partialBody, func(c *net.TCPConn) { c.CloseWrite() })
	wantBodyError(t, resp, 499, "client_closed_request")
	if n := logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d error lines:\n%s", n, logs)
	}
	if store.reserves != 0 {
		t.Errorf("%d reservations from a cut body", store.reserves)
	}
}

// TestBodyCutByReadTimeout: a body still incomplete when the server's read
// timeout ends it is a 408, not a 500, and no error is logged. The test
// waits for the timeout but asserts nothing about how long it took.
func TestBodyCutByReadTimeout(t *testing.T) {
	addr, store, logs := cutBodyServer(t, 100*time.Millisecond)
	resp := sendPartial(t, addr, partialBody, func(*net.TCPConn) {})
	wantBodyError(t, resp, http.StatusRequestTimeout, "request_timeout")
	if n := logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d error lines:\n%s", n, logs)
	}
	if store.reserves != 0 {
		t.Errorf("%d reservations from a cut body", store.reserves)
	}
}

// TestBodyBadlyFramed: a chunked body whose framing breaks off is the
// client's error, a 400, not a 500.
func TestBodyBadlyFramed(t *testing.T) {
	addr, store, logs := cutBodyServer(t, time.Minute)
	resp := sendPartial(t, addr, "Transfer-Encoding: chunked\r\n\r\n4\r\n{\"qu\r\nzz\r\n", func(*net.TCPConn) {})
	wantBodyError(t, resp, http.StatusBadRequest, "incomplete_body")
	if n := logs.count("level=ERROR"); n != 0 {
		t.Errorf("%d error lines:\n%s", n, logs)
	}
	if store.reserves != 0 {
		t.Errorf("%d reservations from a broken body", store.reserves)
	}
}
