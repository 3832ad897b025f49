package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
)

// TestServerDrains: Close waits for a request in flight to finish and the
// client gets its whole answer; only then does Close return.
func TestServerDrains(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "done")
	})
	s := httpapi.NewServer(h, quiet)
	if err := s.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Get(s.URL() + "/slow")
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{string(b), err}
	}()
	<-entered

	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- s.Close(ctx)
	}()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if a := <-got; a.err != nil || a.body != "done" {
		t.Errorf("the request in flight got %q, %v", a.body, a.err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := http.Get(s.URL() + "/after"); err == nil {
		t.Error("the server still accepts requests after Close")
	}
}

// TestServerCloseCutsOff: when draining runs out of time, Close closes the
// connections and reports the deadline rather than hanging.
func TestServerCloseCutsOff(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s := httpapi.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), quiet)
	if err := s.Open("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get(s.URL())
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); err == nil {
		t.Error("Close reported no error after cutting a request off")
	}
	<-errc
}
