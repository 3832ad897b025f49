package lab

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSourceCapRejectsAtOnce(t *testing.T) {
	s := NewSource(SourceConfig{Latency: 100 * time.Millisecond, Cap: 2})
	s.Begin(time.Now(), 0, time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.Load(context.Background(), "k") }()
	}
	wg.Wait()
	rejected := 0
	for _, err := range errs {
		if errors.Is(err, ErrRejected) {
			rejected++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	total, win := s.Calls()
	if rejected != 3 || total != 2 || win != 2 {
		t.Fatalf("rejected %d, calls %d (window %d); want 3, 2, 2", rejected, total, win)
	}
}

func TestSourceQueueWaitAndFaults(t *testing.T) {
	s := NewSource(SourceConfig{Latency: 20 * time.Millisecond, Cap: 1, QueueWait: time.Second})
	s.Begin(time.Now(), time.Hour, 2*time.Hour)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Load(context.Background(), "k"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if total, win := s.Calls(); total != 3 || win != 0 {
		t.Fatalf("calls %d, window %d; want 3 queued then served, 0 in window", total, win)
	}
	s.SetDown(true)
	if _, err := s.Load(context.Background(), "k"); !errors.Is(err, ErrSourceDown) {
		t.Fatalf("down: %v", err)
	}
	s.SetDown(false)
	hooked := ""
	s.AfterLoad(func(key string) { hooked = key })
	v, err := s.Load(context.Background(), "abc")
	if err != nil || len(v) != 512 || string(v[:3]) != "abc" || hooked != "abc" {
		t.Fatalf("value %q err %v hook %q", v[:3], err, hooked)
	}
	if ps := s.CallsPerSecond(); len(ps) != 1 || ps[0] != 5 {
		t.Fatalf("per second %v, want [5]", ps)
	}
}
