package lab

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress draws a one-line bar on a terminal: scenario, mode, elapsed time
// of the mode against its length, and requests done. It is only created when
// stderr is a terminal, so redirected output stays clean.
type Progress struct {
	w io.Writer

	mu     sync.Mutex
	label  string
	start  time.Time
	length time.Duration
	done   atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// IsTerminal reports whether f is a character device (a terminal), without a
// dependency: the same test golang.org/x/term makes on most systems, and
// enough to keep the bar out of files and pipes.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// NewProgress returns a bar drawing on w, redrawn four times a second until
// Close.
func NewProgress(w io.Writer) *Progress {
	p := &Progress{w: w, stop: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	return p
}

// Begin starts a new bar for label lasting about length.
func (p *Progress) Begin(label string, length time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.start, p.length = label, time.Now(), length
	p.done.Store(0)
}

// Add counts n requests done.
func (p *Progress) Add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

func (p *Progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *Progress) draw() {
	p.mu.Lock()
	label, start, length := p.label, p.start, p.length
	p.mu.Unlock()
	if label == "" || length <= 0 {
		return
	}
	el := time.Since(start)
	frac := min(float64(el)/float64(length), 1)
	const width = 30
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r\033[K%-32s [%s%s] %5.1fs/%.0fs %d req",
		label, strings.Repeat("#", n), strings.Repeat(".", width-n),
		el.Seconds(), length.Seconds(), p.done.Load())
}

// Close stops the bar and clears its line.
func (p *Progress) Close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
}
