package lab

import (
	"math"
	"testing"
	"time"
)

func TestRecorderPercentiles(t *testing.T) {
	r := NewRecorder(2*time.Second, 3*time.Second)
	// 1..1000 ms, one each, spread over the first 4 seconds.
	for i := 1; i <= 1000; i++ {
		at := time.Duration(i-1) * 4 * time.Millisecond
		o := OK
		switch i % 10 {
		case 1:
			o = Failed
		case 2:
			o = Rejected
		case 3:
			o = Stale
		}
		r.Record(at, time.Duration(i)*time.Millisecond, o)
	}
	s := r.Overall()
	if s.Requests != 1000 || s.Errors != 100 || s.Rejected != 100 || s.Stale != 100 {
		t.Fatalf("counts %+v", s)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", s.P50, 500}, {"p95", s.P95, 950}, {"p99", s.P99, 990}, {"max", s.Max, 1000}} {
		// Three significant digits: within 0.1%.
		if math.Abs(c.got-c.want) > c.want*0.001+0.001 {
			t.Errorf("%s = %v ms, want %v", c.name, c.got, c.want)
		}
	}
	// Window [2 s, 3 s): requests 501..750.
	w := r.Window()
	if w.Requests != 250 {
		t.Fatalf("window requests %d, want 250", w.Requests)
	}
	if math.Abs(w.P50-625) > 1 || math.Abs(w.Max-750) > 1 {
		t.Errorf("window p50 %v max %v, want 625, 750", w.P50, w.Max)
	}
	sec := r.Seconds(6)
	if len(sec) != 6 {
		t.Fatalf("%d seconds, want 6 (padded)", len(sec))
	}
	for i := range 4 {
		if sec[i].Requests != 250 {
			t.Errorf("second %d: %d requests, want 250", i, sec[i].Requests)
		}
	}
	if sec[0].P99 > 252 || sec[3].P50 < 870 || sec[5].Requests != 0 {
		t.Errorf("per-second series wrong: %+v", sec)
	}
}

func TestRecorderClampsOutOfRange(t *testing.T) {
	r := NewRecorder(0, 0)
	r.Record(0, 0, OK)
	r.Record(0, time.Hour, OK) // past the range: clamped, not dropped
	if s := r.Overall(); s.Requests != 2 || s.Max < 299_000 {
		t.Fatalf("%+v", s)
	}
}
