// Package redis is a tier.Tier over Redis 7, standalone, Cluster, or a
// primary with replicas under Redis Sentinel, built on
// github.com/redis/rueidis.
//
// Every call goes through a circuit breaker first. While Redis is healthy the
// breaker is closed and a Get is one GET, sent on rueidis's auto-pipelined
// connection with a deadline of ReadBudget (default 50 ms): rueidis stops
// waiting at the deadline and drops the late reply, so a frozen or
// unreachable Redis costs a read at most its budget. A nil reply is a miss,
// never a failure. Failures and timeouts feed the breaker; after 5 failures
// in a row, or half of at least 20 calls in 10 s, it opens and every call
// returns at once with an error wrapping tier.ErrBypassed, without
// touching Redis. After 1 s (doubling while Redis stays bad) a few probe
// calls go through; if they succeed the breaker closes. A call the caller
// cancels says nothing about Redis and is not counted; a reply from before
// the breaker last changed state is ignored. A timeout of a standalone
// server is judged by what the server did around it: seen answering (a
// late scheduler on a busy host, or a queue of this process's own
// commands), it counts toward the rate only; silent for the read budget
// and then for two 250 ms PINGs, it opens the breaker at once.
//
// Keys: the Cache passes keys already qualified as "<namespace>:<key>", where
// a namespace never contains ':'; the tier prepends Options.KeyPrefix. So the
// Redis key is KeyPrefix + namespace + ":" + key, and two namespaces cannot
// collide. GetMany sends one MGET per Cluster hash slot (one MGET in all for
// a standalone server), pipelined together; Set pipelines one
// SET key value PX ttl per item.
//
// Client-side caching (RESP3 tracking) is off: the Cache has its own
// in-process hot tier with its own bounds, and a second, invisible one would
// make staleness impossible to reason about. rueidis's retries are off too:
// within a 50 ms budget a retry mostly spends the time the caller needs for
// its fallback, and the breaker has to see the failure.
//
// In a Redis Cluster each node also gets its own health (nodes.go): a node
// is ejected after 3 failures in a row (or half of its recent requests) and
// PINGed back on a jittered backoff from 250 ms to 1 s; a watchdog closes a
// connection that has had a request outstanding and no reply for 1 s;
// replicas are polled in the background for readiness (replication link up,
// no sync or load in progress, offset close to the primary's) and take
// reads only when ready; and each read goes to a node picked uniformly at
// random among its slot's primary and ready replicas. When none is left the
// read returns at once with an error wrapping tier.ErrBypassed, so the
// Cache falls back to last-known-good or its loader without waiting. A
// failing node counts against the tier's breaker only when no more nodes
// may be ejected, so one bad node never opens it for all. Every command for
// a slot's primary (writes, scripts, leases, version reads) is accounted to
// that primary the same way, and refused at once while it is ejected
// (toPrimaries). NodeStats reports each node. Options.Cluster tunes all of it;
// Disabled restores rueidis's own routing to primaries.
//
// Under Redis Sentinel (Options.Sentinel) the tier asks the sentinels for
// the primary and treats it as a standalone server that moves
// (sentinel.go): it subscribes to +switch-master on every sentinel and
// moves on the first announcement, looks again at once when a write is
// answered READONLY, and every Sentinel.RefreshInterval (1 s) when the
// primary does not answer ROLE as a master. On each move the breaker
// starts over and the invalidation stream subscribes on the new primary;
// invalidations that failed during the failover are replayed to it by
// the Cache. Its replicas take Get reads only when ready, by the rule of
// Cluster replicas, and are ejected per node (sentinel_reads.go);
// Cluster.Disabled sends every read to the primary.
//
// rueidis honours a ctx deadline on an established, pipelined connection,
// but a call that has to reconnect can be held inside rueidis past it (the
// connection handshake, waiting for another call's dial, closing a failed
// connection). So after any failure, and while the breaker is not closed,
// reads run on a guard goroutine and the caller leaves at the budget
// whatever rueidis does; while Redis is healthy they call rueidis directly,
// because the guard costs about a quarter of the throughput. New opens
// rueidis's connections up front so that the first failure meets an
// established connection. Writes are guarded the same way, with
// WriteTimeout as their bound.
package redis
