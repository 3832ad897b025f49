package hitratio

import "container/heap"

// Belady returns the hits of Belady's optimal policy (MIN) replaying keys
// through a cache of capacity entries: on a miss with the cache full it
// evicts the entry whose next request is furthest away, or does not keep
// the requested key at all when that key's own next request is furthest
// (the variant with bypass, optimal among caches that may decline to admit,
// as TinyLFU's do; MIN without bypass is not a ceiling for them). It knows
// the future, so it is the ceiling any cache of that capacity can reach on
// the sequence.
func Belady(keys []uint64, capacity int) int {
	if capacity <= 0 {
		return 0
	}
	next := nextUse(keys)
	// The cache as a max-heap of its entries' next requests. An entry's
	// next request is an index of keys, distinct from every other
	// entry's; "never again" is len(keys) plus the request's own index,
	// also distinct.
	pos := make(map[uint64]int, capacity) // key -> its entry's index in h
	h := &useHeap{pos: pos}
	hits := 0
	for i, k := range keys {
		if j, ok := pos[k]; ok {
			hits++
			h.items[j].next = next[i]
			heap.Fix(h, j)
			continue
		}
		if h.Len() < capacity {
			heap.Push(h, use{key: k, next: next[i]})
			continue
		}
		if h.items[0].next < next[i] {
			continue // bypass: this key is the one wanted last
		}
		delete(pos, h.items[0].key)
		h.items[0] = use{key: k, next: next[i]}
		pos[k] = 0
		heap.Fix(h, 0)
	}
	return hits
}

// nextUse returns, for each request i, the index of the next request of the
// same key, or len(keys)+i when there is none.
func nextUse(keys []uint64) []int {
	next := make([]int, len(keys))
	last := make(map[uint64]int)
	for i := len(keys) - 1; i >= 0; i-- {
		if j, ok := last[keys[i]]; ok {
			next[i] = j
		} else {
			next[i] = len(keys) + i
		}
		last[keys[i]] = i
	}
	return next
}

type use struct {
	key  uint64
	next int
}

// useHeap is a max-heap of uses by next request that keeps pos, each key's
// index in items, up to date as items move.
type useHeap struct {
	items []use
	pos   map[uint64]int
}

func (h *useHeap) Len() int           { return len(h.items) }
func (h *useHeap) Less(i, j int) bool { return h.items[i].next > h.items[j].next }
func (h *useHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i].key] = i
	h.pos[h.items[j].key] = j
}
func (h *useHeap) Push(x any) {
	u := x.(use)
	h.pos[u.key] = len(h.items)
	h.items = append(h.items, u)
}
func (h *useHeap) Pop() any {
	u := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.pos, u.key)
	return u
}
