// Package holdfast is a read-through cache that keeps a read-heavy service
// answering, fast, when its cache fails.
//
// A read goes through up to three tiers. The hot tier is a small map of
// encoded bytes in this process (TTL one minute, never past a value's soft
// time). The shared tier is a tier.Tier, normally Redis (package redis), that every
// process reads and writes. The loader is the source of truth, normally the
// database. Concurrent misses of one key in one process join one flight, so
// the loader runs once however many readers wait; each reader may leave on its
// own context while the flight goes on, bounded by the namespace's load
// timeout. Loads pass a process-wide limiter that rejects rather than queues.
//
// Every stored value carries its origin time (when it was read from the
// source, unchanged as it moves between tiers), a soft time and a hard time.
// Before soft a value is fresh. Between soft and hard it is returned at once
// and one background refresh per key runs. Past hard a read loads
// synchronously.
//
// Every fallback is one rule: a read that waits on a stage (the shared-tier
// read, or the load with its lease and limiter) holds at most one copy it
// may be answered with instead, and takes it at the stage's deadline. The
// deadline is a few times the stage's usual latency (the slow-read delay,
// Policy.SlowLoadGrace), and 0 where the path is known bad: the shared tier
// down, the key's source in backoff after failed loads, the limiter full,
// another process loading the key under a lease. The copy is the last good
// value this process saw, or the shared tier's past-hard one: within its
// hard time, or, where the source is slow or failing, within its
// stale-if-error window past hard, counted from origin. So while the shared
// tier is down an outage costs one load per key per TTL, not one per read.
// Result.Source and Result.Reason say which copy answered and why.
//
// The hot tier holds every key read, its eviction keeping the most read
// within its bytes, where an update elsewhere reaches every copy: without a
// shared tier, and with one that is a tier.InvalidationStream. With a shared
// tier without a stream it holds only the keys read often enough to be hot,
// found as they are read (Policy.Hot). A shared tier that is a tier.Smearer
// (a Redis Cluster) also keeps copies of the keys found hot on several nodes
// and spreads their reads over the copies, and one that is a tier.HotSharer lets processes
// share what they found hot.
//
// Every process hears every invalidation when the shared tier is a
// tier.InvalidationStream (the Redis tier is): once Invalidate has returned
// on one process, every other process that hears the stream serves the new
// value within milliseconds (measured: about 2 ms at the 99th percentile on
// one host), its hot copy dropped as the announcement arrives. A process
// that cannot hear the stream (its Redis node frozen or unreachable) does
// not flush: it serves its hot copies for at most Policy.Hot.MaxUnheard
// (15 s) after it last heard the stream, then empties its hot tier until it
// hears again, and then checks every older copy against the shared tier;
// meanwhile last-known-good answers within the TTL, as in any shared-tier
// outage. So an update is served everywhere within milliseconds while the
// stream is heard, and within Hot.MaxUnheard (hot copies) or the TTL
// (last-known-good, only while the shared tier also fails) when it is not.
// An Invalidate made while its own process cannot reach the shared tier is
// queued and announced when it is replayed, as soon as that process hears
// the stream again: the same outage bound applies to it.
//
// What an invalidation leaves behind is one rule, the key's watermark: when
// this process last invalidated the key, and when it last heard another
// process do so. A copy loaded before it may predate the write it
// announced. Read from the shared tier, such a copy is a miss, whichever
// process invalidated (a node may not have taken the delete: a replica
// behind, a failover, a delete still queued for replay). Held in memory, it
// answers only a load that failed, within stale-if-error, when the
// invalidation was another process's, and never once this process's own
// Invalidate has returned (read-your-invalidations). A load under way when
// its key is invalidated stores nothing (the stale-set guard), and keeps
// its value only as such a fallback.
//
// Values are bytes at the bottom, wrapped in a versioned, checksummed
// envelope (see tier.Entry); Typed adds a codec on top. Corrupt bytes from a shared
// tier are a miss, never a panic.
package holdfast
