package httpapi_test

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/holdfast-dev/holdfast/catalogd/httpapi"
)

// TestRejectionLogIsRateLimited: a flood of 503s writes one warn line for
// each kind (overloaded, unavailable) at once, and then at most one line
// per 10 s, which counts the 503s it stands for; not a line per request.
func TestRejectionLogIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &logSink{}
		e := newEnv(t, setup{maxLoads: 1, logger: slog.New(slog.NewTextHandler(logs, nil)),
			policies: func(p *httpapi.Policies) {
				withoutReservedLoads(p)
				p.Product.LoadTimeout = time.Hour // the slow load holds the only slot until released
			}})
		e.store.blockID, e.store.entered, e.store.release = 4, make(chan struct{}), make(chan struct{})
		done := make(chan int)
		go func() { done <- e.get("/v1/products/4").Code }()
		<-e.store.entered

		for i := range 500 {
			if rec := e.get("/v1/products/5"); rec.Code != 503 {
				t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
			}
		}
		if n := logs.count("level=WARN"); n != 1 || logs.count(`msg="request rejected" code=overloaded method=GET path=/v1/products/5`) != 1 {
			t.Fatalf("%d warn lines after 500 rejections, want the first alone:\n%s", n, logs)
		}
		time.Sleep(10 * time.Second)
		e.get("/v1/products/5")
		if n := logs.count(`msg="request rejected" code=overloaded`); n != 2 || logs.count("count=500") != 1 {
			t.Fatalf("want a second line 10 s later standing for the other 499 and itself:\n%s", logs)
		}

		close(e.store.release)
		if code := <-done; code != 200 {
			t.Errorf("the slow load ended %d", code)
		}

		// A database that cannot be reached is a kind of its own: its
		// first 503 is logged at once, the next are counted.
		e.store.setReadErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
		for i := range 100 {
			if rec := e.get("/v1/products/" + strconv.Itoa(10+i)); rec.Code != 503 {
				t.Fatalf("with the database unreachable: %d %s", rec.Code, rec.Body)
			}
		}
		if n := logs.count(`msg="request rejected" code=unavailable`); n != 1 {
			t.Fatalf("%d unavailable lines after 100, want 1:\n%s", n, logs)
		}
		if n := logs.count("level=WARN"); n != 3 {
			t.Errorf("%d warn lines in all, want 3:\n%s", n, logs)
		}
		if strings.Contains(logs.String(), "level=ERROR") {
			t.Errorf("503s logged as errors:\n%s", logs)
		}
	})
}
