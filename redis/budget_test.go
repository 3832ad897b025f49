package redis

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestReadContextSharedSlot: uncancellable reads of one millisecond share
// a context, which stays live while a read holds it and is cancelled (its
// timer stopped) once a later millisecond's has replaced it and its last
// read is done.
func TestReadContextSharedSlot(t *testing.T) {
	tr := &Tier{}
	tr.opts.ReadBudget = time.Minute // no deadline during the test

	var first context.Context
	var doneFirst context.CancelFunc
	for {
		ms := time.Now().UnixMilli()
		a, doneA := tr.readContext(context.Background())
		b, doneB := tr.readContext(context.Background())
		if time.Now().UnixMilli() != ms {
			doneA()
			doneB()
			continue // crossed a millisecond: try again
		}
		if a != b {
			t.Fatal("two reads of one millisecond got different contexts")
		}
		doneB()
		first, doneFirst = a, doneA
		break
	}

	time.Sleep(2 * time.Millisecond)
	next, doneNext := tr.readContext(context.Background())
	if next == first {
		t.Fatal("a read of a later millisecond got the earlier context")
	}
	if err := first.Err(); err != nil {
		t.Fatalf("replaced context cancelled while a read holds it: %v", err)
	}
	doneFirst()
	if err := first.Err(); err != context.Canceled {
		t.Fatalf("replaced context after its last read: err = %v, want context.Canceled", err)
	}
	doneNext()
	if err := next.Err(); err != nil {
		t.Fatalf("current context cancelled with no read left: %v", err)
	}
}

// TestReadContextNeverHandsOutADoneContext: under concurrent reads across
// millisecond boundaries no read gets a context already ended.
func TestReadContextNeverHandsOutADoneContext(t *testing.T) {
	tr := &Tier{}
	tr.opts.ReadBudget = time.Minute
	end := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(end) {
				ctx, done := tr.readContext(context.Background())
				if err := ctx.Err(); err != nil {
					t.Errorf("read got an ended context: %v", err)
					done()
					return
				}
				done()
			}
		})
	}
	wg.Wait()
}

// TestReadContextCancellableReadsOwnTheirs: a read the caller can cancel
// gets a context of its own, ended by the caller's cancellation.
func TestReadContextCancellableReadsOwnTheirs(t *testing.T) {
	tr := &Tier{}
	tr.opts.ReadBudget = time.Minute
	parent, cancel := context.WithCancel(context.Background())
	ctx, done := tr.readContext(parent)
	defer done()
	cancel()
	if err := ctx.Err(); err != context.Canceled {
		t.Fatalf("after the caller cancelled: err = %v, want context.Canceled", err)
	}
}
