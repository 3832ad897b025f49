package holdfast

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// pendingDeletes holds a namespace's invalidations whose shared-tier delete
// failed or was skipped by an open breaker. They are replayed until the tier
// takes them; meanwhile this process reads the shared tier's copy of such a
// key as a miss, so the old value is never served from it here (seed 000's
// open point: an eviction that fails during an outage leaves an old value
// until its TTL).
//
// The set is bounded and deduplicated; each key keeps a sequence number so a
// replay that raced a newer invalidation of the same key does not forget it.
type pendingDeletes struct {
	n    atomic.Int64 // len(keys), read without the lock on the read path
	mu   sync.Mutex
	keys map[string]uint64
	seq  uint64
}

// add records key and reports whether it fit under max.
func (p *pendingDeletes) add(key string, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.keys == nil {
		p.keys = make(map[string]uint64)
	}
	if _, ok := p.keys[key]; !ok && len(p.keys) >= max {
		return false
	}
	p.seq++
	p.keys[key] = p.seq
	p.n.Store(int64(len(p.keys)))
	return true
}

func (p *pendingDeletes) has(key string) bool {
	if p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	_, ok := p.keys[key]
	p.mu.Unlock()
	return ok
}

// batch returns up to max pending keys with their sequence numbers.
func (p *pendingDeletes) batch(max int) ([]string, []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, min(max, len(p.keys)))
	seqs := make([]uint64, 0, cap(keys))
	for k, s := range p.keys {
		if len(keys) == max {
			break
		}
		keys = append(keys, k)
		seqs = append(seqs, s)
	}
	return keys, seqs
}

// done forgets keys whose deletes went through, unless invalidated again
// since the batch was taken.
func (p *pendingDeletes) done(keys []string, seqs []uint64) {
	p.mu.Lock()
	for i, k := range keys {
		if p.keys[k] == seqs[i] {
			delete(p.keys, k)
		}
	}
	p.n.Store(int64(len(p.keys)))
	p.mu.Unlock()
}

// replayBatch is how many keys one replay sends in one Delete call.
const replayBatch = 256

// replayInvalidations runs while the cache is open and has a shared tier:
// every ReplayInterval it retries the pending deletes of every namespace.
func (c *Cache) replayInvalidations() {
	c.everyInterval(c.opts.ReplayInterval, func(ns *Namespace) { ns.replayPending(c.ctx) })
}

// everyInterval calls f for each namespace every d, on the calling
// goroutine, until the Cache closes.
func (c *Cache) everyInterval(d time.Duration, f func(*Namespace)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		nss := make([]*Namespace, 0, len(c.namespaces))
		for _, ns := range c.namespaces {
			nss = append(nss, ns)
		}
		c.mu.Unlock()
		for _, ns := range nss {
			f(ns)
		}
	}
}

// replayPending sends one batch of this namespace's pending deletes.
func (n *Namespace) replayPending(ctx context.Context) {
	if n.pending.n.Load() == 0 {
		return
	}
	keys, seqs := n.pending.batch(replayBatch)
	qualified := make([]string, len(keys))
	for i, k := range keys {
		qualified[i] = n.prefix + k
	}
	ctx, cancel := context.WithTimeout(ctx, n.c.opts.ReplayInterval)
	defer cancel()
	if err := n.deleteShared(ctx, qualified...); err != nil {
		n.countTierError(err, evSharedDelError)
		return
	}
	n.pending.done(keys, seqs)
	n.ctr.add(evReplayedDeletes, uint64(len(keys)))
	n.c.logger().Info("holdfast: replayed invalidations", "namespace", n.name, "keys", len(keys))
}
