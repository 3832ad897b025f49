package redis

import (
	"sync/atomic"

	"github.com/holdfast-dev/holdfast/internal/breaker"
)

// BreakerState is the state of the tier's breaker.
type BreakerState = breaker.State

// The breaker states, re-exported for Stats readers.
const (
	BreakerClosed   = breaker.Closed
	BreakerOpen     = breaker.Open
	BreakerHalfOpen = breaker.HalfOpen
)

// Stats is a snapshot of a Tier's counters since New. Reads count keys, not
// calls: a GetMany of 10 keys adds 10 to Gets. Every Get key ends in exactly
// one of Hits, Misses, Errors or Bypassed; Timeouts and TooLarge are subsets
// of Errors. Writes likewise count items and keys.
type Stats struct {
	Gets     uint64 // keys read
	Hits     uint64 // found
	Misses   uint64 // not found (a nil reply); never an error
	Errors   uint64 // failed reads, timeouts included
	Timeouts uint64 // reads past ReadBudget or the caller's deadline
	Bypassed uint64 // reads skipped by the open breaker

	Sets         uint64 // items written
	SetErrors    uint64 // failed writes, TooLarge included
	SetBypassed  uint64 // writes skipped by the open breaker
	Deletes      uint64 // keys deleted
	DeleteErrors uint64 // failed deletes
	DelBypassed  uint64 // deletes skipped by the open breaker
	TooLarge     uint64 // keys or values refused by MaxKeyBytes/MaxStoredBytes

	CopyReads     uint64 // reads of hot keys sent to a copy on another primary (smear.go); also in Gets
	CopyFallbacks uint64 // copy reads that missed, or found the copy's node ejected, and read the key itself
	CopyWrites    uint64 // copies written beside their hot keys; also in Sets
	CopyFills     uint64 // copies filled from their key after a copy read missed
	CopyDeletes   uint64 // copies deleted by Invalidate, hot or not

	StreamHeard   uint64 // invalidation announcements heard (stream.go)
	StreamCorrupt uint64 // messages on the stream's channel that were not announcements; ignored
	StreamLosses  uint64 // subscriptions that broke or whose heartbeat was overdue, each reported as a possible loss
	StreamRefused uint64 // announcements the server refused (an ACL without the channel); the invalidations themselves took place

	PrimaryMoves uint64 // Sentinel shape: times the tier followed the sentinels to a new primary (sentinel.go)

	BreakerState       BreakerState
	BreakerTransitions uint64 // breaker state changes
	BreakerOpens       uint64 // times the breaker opened
}

// counter is an atomic counter alone on its cache line, so that the
// counters every read bumps (gets, hits) do not false-share with each other
// across cores.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

func (c *counter) add(n int)    { c.n.Add(uint64(n)) }
func (c *counter) load() uint64 { return c.n.Load() }

type counters struct {
	_                                                            [64]byte // keep gets off the line of Tier's read-only fields
	gets, hits, misses, errors, timeouts, bypassed               counter
	sets, setErrors, setBypassed                                 counter
	deletes, deleteErrors, delBypassed, tooLarge                 counter
	copyReads, copyFallbacks, copyWrites, copyFills, copyDeletes counter
	streamHeard, streamCorrupt, streamLosses, streamRefused      counter
	primaryMoves                                                 counter
}

// Stats returns a snapshot of the counters. The fields are read one by one,
// so under concurrent use they can be a few calls apart.
func (t *Tier) Stats() Stats {
	c := &t.stats
	bc := t.br.Counts()
	return Stats{
		Gets:               c.gets.load(),
		Hits:               c.hits.load(),
		Misses:             c.misses.load(),
		Errors:             c.errors.load(),
		Timeouts:           c.timeouts.load(),
		Bypassed:           c.bypassed.load(),
		Sets:               c.sets.load(),
		SetErrors:          c.setErrors.load(),
		SetBypassed:        c.setBypassed.load(),
		Deletes:            c.deletes.load(),
		DeleteErrors:       c.deleteErrors.load(),
		DelBypassed:        c.delBypassed.load(),
		TooLarge:           c.tooLarge.load(),
		CopyReads:          c.copyReads.load(),
		CopyFallbacks:      c.copyFallbacks.load(),
		CopyWrites:         c.copyWrites.load(),
		CopyFills:          c.copyFills.load(),
		CopyDeletes:        c.copyDeletes.load(),
		StreamHeard:        c.streamHeard.load(),
		StreamCorrupt:      c.streamCorrupt.load(),
		StreamLosses:       c.streamLosses.load(),
		StreamRefused:      c.streamRefused.load(),
		PrimaryMoves:       c.primaryMoves.load(),
		BreakerState:       bc.State,
		BreakerTransitions: bc.Transitions,
		BreakerOpens:       bc.Opens,
	}
}
