package hotkey

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"
)

const sec = int64(time.Second)

// feed records reads of key at rate per second over [from, from+dur) on a
// synthetic clock, spread evenly.
func feed(d *Detector, key string, rate float64, from int64, dur time.Duration) int64 {
	n := int(rate * dur.Seconds())
	step := float64(dur) / float64(n)
	for i := range n {
		d.Record(key, from+int64(float64(i)*step))
	}
	return from + int64(dur)
}

func TestFindsKeysAboveTheThreshold(t *testing.T) {
	// Sample 1: this test is about the estimates, not the sampling noise
	// (8 to 16 samples a second at 40 reads/s move them by a quarter).
	d := New(Options{Threshold: 20, HalfLife: 5 * time.Second, Sample: 1})
	start := int64(1_000) * sec
	var end int64
	// Interleave the keys in time: 1 s slices for 60 s.
	for s := range 60 {
		at := start + int64(s)*sec
		feed(d, "hot-100", 100, at, time.Second)
		feed(d, "warm-40", 40, at, time.Second)
		feed(d, "cool-10", 10, at, time.Second)
		for k := range 50 {
			feed(d, fmt.Sprint("cold-", s, "-", k), 1, at, time.Second)
		}
		end = at + sec
	}
	hot := d.Hot(end)
	if len(hot) != 2 || hot[0].Key != "hot-100" || hot[1].Key != "warm-40" {
		t.Fatalf("hot set %+v, want hot-100 then warm-40", hot)
	}
	for _, h := range hot {
		want := map[string]float64{"hot-100": 100, "warm-40": 40}[h.Key]
		if math.Abs(h.Rate-want)/want > 0.35 {
			t.Errorf("%s: estimated %.1f reads/s, want about %.0f", h.Key, h.Rate, want)
		}
	}
	if d.IsHot("cool-10", end) {
		t.Error("a key at half the threshold is hot")
	}
}

func TestPromotedWithinASecond(t *testing.T) {
	d := New(Options{}) // threshold 1000/min, half-life 10 s
	now := int64(5_000) * sec
	for k := range 10_000 { // background of cold keys
		d.Record(fmt.Sprint("cold-", k), now+int64(k)*int64(time.Millisecond)/10)
	}
	now += sec
	end := feed(d, "spike", 1600, now, time.Second) // 80% of 2,000 req/s
	if !d.IsHot("spike", end) {
		t.Fatal("a key read 1,600 times a second was not hot after one second")
	}
	// Cooled: no more reads. Demoted after HalfLife·log2(rate/threshold).
	r := d.Hot(end)[0].Rate
	bound := time.Duration(float64(10*time.Second) * math.Log2(r/(1000.0/60)))
	if d.IsHot("spike", end+int64(bound)+sec) {
		t.Fatalf("still hot %v after it cooled (bound %v)", bound+time.Second, bound)
	}
	if !d.IsHot("spike", end+int64(bound/2)) {
		t.Fatalf("demoted before half the bound %v", bound/2)
	}
}

func TestBoundedMemory(t *testing.T) {
	d := New(Options{Capacity: 64, Sample: 1})
	now := int64(1) * sec
	for k := range 100_000 {
		d.Record(fmt.Sprint("k", k), now)
		if k%10 == 0 {
			d.Record("hot", now)
		}
		now += int64(time.Millisecond) / 10
	}
	n := 0
	for i := range d.shards {
		n += len(d.shards[i].index)
		if len(d.shards[i].heap) > d.per || len(d.shards[i].heap) != len(d.shards[i].index) {
			t.Fatal("a shard outgrew its share")
		}
	}
	if n > 64 {
		t.Fatalf("%d keys tracked with capacity 64", n)
	}
	if h := d.Hot(now); len(h) == 0 || h[0].Key != "hot" {
		t.Fatalf("the hot key was lost among 100,000 cold ones: %+v", h)
	}
}

func TestRebase(t *testing.T) {
	d := New(Options{HalfLife: time.Millisecond, Threshold: 10, Sample: 1})
	// 200 half-lives: the forward-decay weights would overflow without a
	// rebase.
	now := int64(sec)
	for range 2000 {
		d.Record("k", now)
		now += int64(100 * time.Microsecond)
	}
	hot := d.Hot(now)
	if len(hot) != 1 || math.IsInf(hot[0].Rate, 0) || math.IsNaN(hot[0].Rate) || math.Abs(hot[0].Rate-10_000)/10_000 > 0.2 {
		t.Fatalf("after many half-lives: %+v, want k at about 10,000/s", hot)
	}
}

func TestConcurrent(t *testing.T) {
	d := New(Options{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20_000 {
				now := int64(i) * int64(time.Microsecond)
				d.Record(fmt.Sprint(i%(50*(g+1))), now)
				if i%2 == 0 {
					d.Record("viral", now)
				}
				if i%1000 == 0 {
					d.Hot(int64(i) * int64(time.Microsecond))
					d.IsHot("1", int64(i)*int64(time.Microsecond))
				}
			}
		}()
	}
	wg.Wait()
	// "viral" was a third of the reads, 80,000 within 20 ms: hot whatever
	// the sampling and the interleaving. (Keys of the flat background are
	// not checked: 400 keys of similar counts over 256 candidates is
	// where Space-Saving may drop any one of them.)
	now := int64(20_000) * int64(time.Microsecond)
	if !d.IsHot("viral", now) {
		t.Error("a third of all reads, and not hot")
	}
	if d.IsHot("never-read", now) {
		t.Error("a key never read is hot")
	}
	hot := d.Hot(now)
	if len(hot) == 0 || hot[0].Key != "viral" {
		t.Fatalf("hottest keys %v: want \"viral\" first", hot[:min(len(hot), 3)])
	}
	seen := map[string]bool{}
	for i, k := range hot {
		if n, err := strconv.Atoi(k.Key); k.Key != "viral" && (err != nil || n < 0 || n >= 400) {
			t.Errorf("hot key %q was never read", k.Key)
		}
		if seen[k.Key] {
			t.Errorf("hot key %q listed twice", k.Key)
		}
		seen[k.Key] = true
		if i > 0 && k.Rate > hot[i-1].Rate {
			t.Errorf("hot keys not fastest first: %v after %v", k, hot[i-1])
		}
	}
}
