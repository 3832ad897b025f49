// Package hitratio measures the hit ratio of holdfast's in-process store
// against other Go caches and Belady's optimal policy, on synthetic
// workloads (Zipf, loop, scan, shifting popularity) and on published traces
// (the ARC, LIRS and libCacheSim oracleGeneral formats).
//
// A comparison replays one key sequence through each cache in turn, one
// request at a time on one goroutine: a read that misses stores the key's
// value (holdfast: a read through a namespace whose loader answers it).
// Caches that apply writes on goroutines of their own are waited for after
// each write (theine, ristretto) or given a synchronous executor (otter),
// and holdfast's load flights are waited for, so that each request sees
// the cache as the one before left it. holdfast's store hashes from the
// run's seed (Config.Seed), so its figures, the LRU's and Belady's are the
// same in every run of a seed; the others' still move a little: otter and
// theine seed their hashes afresh, sturdyc evicts in a Go map's order, and
// ristretto's frequency counts arrive in batches through lossy buffers.
//
// The caches are given the same room in one of two ways (Mode): the same
// number of entries, holdfast's byte budget worked out from what its store
// charges an entry of the run's shape; or the same bytes, each other
// cache as many entries as fit at the live heap an entry takes it,
// measured.
//
// Besides the caches already compared in this module's other benchmarks
// (otter, ristretto, sturdyc), it imports theine (github.com/Yiling-J/theine-go),
// the other W-TinyLFU cache for Go, whose adaptive window differs from
// otter's, and hashicorp's LRU (github.com/hashicorp/golang-lru/v2), the
// plain recency baseline most Go services start from.
package hitratio
