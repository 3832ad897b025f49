package redis

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/holdfast-dev/holdfast/tier"
)

// The Tier is a tier.InvalidationStream: the script that invalidates a key
// also PUBLISHes its announcement, atomically with the version bump, on the
// channel StreamOptions.Channel; every process SUBSCRIBEs to it on one node
// and hands what it hears to its Cache, which drops its in-memory copies.
//
// Why pub/sub in a script, and not the server-assisted client-side caching
// of RESP3 (CLIENT TRACKING): tracking announces every change of a key,
// and the Cache's own writes change them all the time (every load, refresh
// and smeared copy is a SET), so each refill anywhere would drop every
// process's hot copy of the key; it announces expiries too; it is per
// connection and per node, so in a Cluster it must be armed on a connection
// to every primary and re-armed after every reconnect, failover and slot
// move, and a connection that breaks loses what was in flight without a
// trace (clients then flush everything, which during an outage sends every
// read to the database); and some managed services refuse it. An
// announcement made by the invalidation itself is sent exactly when a key
// is invalidated, costs one message, and needs no per-node state.
//
// In a Cluster, a classic PUBLISH reaches every node over the cluster bus,
// so a process listens on any one node, and moves to another when that one
// fails. What cannot be seen is a message lost on its way. Two checks:
//
//   - every Heartbeat (1 s) each process publishes a heartbeat on a
//     channel of its own (through the tier's client, which spreads keyless
//     commands over the nodes), and hearing it come back is how it knows
//     the stream delivers, bus included (tier.Listener.Heard);
//   - when its subscription has received nothing for a PingInterval
//     (500 ms) and no heartbeat is on its way back, it PINGs the
//     subscribed node on that connection: idle, one PING a second.
//
// A heartbeat overdue by lostAfterHeartbeats intervals (5 s), a
// subscription silent for lostAfterPings PingIntervals (1.5 s), or a broken
// one, is reported as a loss (Listener.Lost), and the process subscribes
// again, on another node; its Cache then checks what it holds against the
// shared tier. The PING costs the one node; the heartbeat costs every node
// of the Cluster, which is why it is the slower of the two: a frozen or
// dead node, the common fault, is found at the PING's pace, a node cut
// off from the bus alone at the heartbeat's, both well within
// Hot.MaxUnheard (15 s).

var _ tier.InvalidationStream = (*Tier)(nil)

// lostAfterHeartbeats is how many heartbeat intervals may pass without one,
// and lostAfterPings how many PingIntervals without anything received on
// the subscription, before the stream is reported lost. A PING goes out
// after one silent interval, so a healthy node has the other two to
// answer: with one (500 ms), 200 idle Caches starting on a saturated
// 2-core machine logged 426 unheard streams, against 256 with the 800 ms
// that a PING after 200 ms had.
const (
	lostAfterHeartbeats = 5
	lostAfterPings      = 3
)

// Stream reconnects back off from streamBackoff, doubling, to
// maxStreamBackoff.
const (
	streamBackoff = 50 * time.Millisecond
	// maxStreamBackoff is short: an attempt on a frozen node already takes
	// lostAfterHeartbeats PingIntervals to give up, and the pause after it is
	// what may add to the time until the process hears again once the
	// outage ends, and with it until updates made meanwhile reach it. Ten
	// dials a second at most, against a node that refuses them, is cheap.
	maxStreamBackoff = 100 * time.Millisecond
)

// firstHeartbeats is how often a new subscription sends a heartbeat until
// one comes back.
const firstHeartbeats = 20 * time.Millisecond

// announcementMagic starts every announcement, to tell it from any other
// message a channel might carry.
const announcementMagic = "hf1"

// appendAnnouncement encodes an announcement: the magic, the origin's
// length (one byte) and bytes, the time in Unix nanoseconds (8 bytes, big
// endian), and the key (the rest).
func appendAnnouncement(b []byte, key string, at time.Time, origin string) []byte {
	if len(origin) > 255 {
		origin = origin[:255]
	}
	b = append(b, announcementMagic...)
	b = append(b, byte(len(origin)))
	b = append(b, origin...)
	b = binary.BigEndian.AppendUint64(b, uint64(at.UnixNano()))
	return append(b, key...)
}

var errNotAnnouncement = errors.New("redis tier: not an invalidation announcement")

// decodeAnnouncement decodes what appendAnnouncement encoded; any other
// bytes are an error.
func decodeAnnouncement(msg string) (key string, at time.Time, origin string, err error) {
	if len(msg) < len(announcementMagic)+1 || msg[:len(announcementMagic)] != announcementMagic {
		return "", time.Time{}, "", errNotAnnouncement
	}
	rest := msg[len(announcementMagic):]
	n := int(rest[0])
	rest = rest[1:]
	if len(rest) < n+8 {
		return "", time.Time{}, "", errNotAnnouncement
	}
	origin, rest = rest[:n], rest[n:]
	at = time.Unix(0, int64(binary.BigEndian.Uint64([]byte(rest[:8]))))
	return rest[8:], at, origin, nil
}

// streamID names this tier's heartbeat channel.
func newStreamID() string {
	var b [12]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Listen implements tier.InvalidationStream.
func (d *tierDriver) Listen(ctx context.Context, l tier.Listener) {
	t := (*Tier)(d)
	var mu sync.Mutex // the Listener's events one at a time
	call := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
	}
	hb := t.opts.Stream.Channel + ":hb:" + t.streamID
	wait := streamBackoff
	last := ""
	for attempt := 0; ctx.Err() == nil; attempt++ {
		last = t.streamAddr(attempt, last)
		if t.listenOnce(ctx, last, hb, l, call) {
			wait = streamBackoff
		}
		call(l.Lost)
		t.streamLost.Store(true)
		t.stats.streamLosses.add(1)
		timer := time.NewTimer(time.Duration(rand.Int64N(int64(wait))) + wait/2)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
		wait = min(2*wait, maxStreamBackoff)
	}
}

// listenOnce subscribes on addr and delivers until the subscription breaks,
// the heartbeat is overdue or ctx ends. It reports whether it heard the
// stream at all.
func (t *Tier) listenOnce(ctx context.Context, addr, hb string, l tier.Listener, call func(func())) (heard bool) {
	sub := t.subscriber(addr)
	if sub == nil {
		return false
	}
	// Closed on a goroutine of the Tier's: on a frozen node Close takes
	// about a second (measured), which would delay the loss reported
	// when this returns, and the next subscription, by as much.
	defer t.closeOff(sub.Close)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var last atomic.Int64  // when a heartbeat last came back
	var alive atomic.Int64 // when the subscription last received anything
	start := time.Now()
	last.Store(start.UnixNano())
	alive.Store(start.UnixNano())
	var gotOne atomic.Bool
	moved := t.primaryMoves()
	done := make(chan error, 1)
	go func() {
		cmd := sub.B().Subscribe().Channel(t.opts.Stream.Channel, hb).Build()
		err := sub.Receive(sctx, cmd, func(m rueidis.PubSubMessage) {
			now := time.Now().UnixNano()
			alive.Store(now)
			if m.Channel == hb {
				last.Store(now)
				gotOne.Store(true)
				if t.streamLost.CompareAndSwap(true, false) {
					t.streamRecovered()
				}
				call(l.Heard)
				return
			}
			key, at, origin, err := decodeAnnouncement(m.Message)
			if err != nil {
				t.stats.streamCorrupt.add(1)
				return
			}
			t.stats.streamHeard.add(1)
			call(func() { l.Invalidated(key, at, origin) })
		})
		t.flog.failed(err) // a refused SUBSCRIBE (an ACL without the channel)
		done <- err
	}()
	// A PING on the subscription's own connection, when it received
	// nothing for a PingInterval, says within lostAfterPings of them that
	// its node froze or the connection died: it costs that node alone.
	// The heartbeat, which crosses the cluster bus to every node, proves
	// the whole way at the slower Heartbeat.
	pingEvery, every := t.opts.Stream.PingInterval, t.opts.Stream.Heartbeat
	var pings sync.WaitGroup
	defer func() {
		cancel() // ends a PING in flight
		pings.Wait()
	}()
	var pinging atomic.Bool
	ping := func() {
		if !pinging.CompareAndSwap(false, true) {
			return
		}
		pings.Add(1)
		go func() {
			defer pings.Done()
			defer pinging.Store(false)
			pctx, pcancel := context.WithTimeout(sctx, lostAfterPings*pingEvery)
			defer pcancel()
			if sub.Do(pctx, sub.B().Ping().Build()).Error() == nil {
				alive.Store(time.Now().UnixNano())
			}
		}()
	}
	// Until its first heartbeat comes back, a new subscription sends one
	// every 20 ms (firstHeartbeats): how soon the stream counts as heard
	// again after an outage is how soon the hot copies from before it are
	// checked and the breaker's backoff cut short, and updates made
	// meanwhile wait on it. (One sent before the SUBSCRIBE took effect is
	// simply not heard.) After that the loop wakes only when something is
	// due, about twice a second idle: a ticker at a fraction of the
	// PingInterval cost an idle process more CPU than all its other
	// background work.
	fast := max(min(firstHeartbeats, pingEvery, every), time.Millisecond)
	timer := time.NewTimer(0)
	defer timer.Stop()
	var sent time.Time
	var echoFrom int64 // when the last heartbeat the server took went out
	// end stops the subscription and reports whether it heard the stream.
	end := func() bool {
		cancel()
		<-done
		return gotOne.Load()
	}
	for {
		select {
		case <-ctx.Done():
			return end()
		case <-done:
			return gotOne.Load()
		case <-moved:
			// On a Sentinel group's old primary the subscription may
			// still hear (as a replica it receives what the new primary
			// publishes), or hear nothing until the PINGs give up: it
			// moves to the new primary at once, as after a loss, since
			// what was published around the failover may not have
			// reached it.
			return end()
		case now := <-timer.C:
			ns := now.UnixNano()
			if ns-last.Load() > int64(lostAfterHeartbeats*every) || ns-alive.Load() > int64(lostAfterPings*pingEvery) {
				return end()
			}
			heard := gotOne.Load()
			echo := false // a heartbeat on its way back stands in for a PING
			if !heard || now.Sub(sent) >= every {
				echo = t.heartbeat(ctx, hb, now)
				sent = now
				if echo {
					echoFrom = ns
				}
			}
			if !echo && ns-alive.Load() >= int64(pingEvery) {
				ping()
			}
			if !heard {
				timer.Reset(fast)
				continue
			}
			// The next of: the heartbeat to send, the PING to send (none
			// while one is in flight or a heartbeat's echo is due), and
			// the two losses to check.
			a := alive.Load()
			next := min(sent.UnixNano()+int64(every), a+int64(lostAfterPings*pingEvery)+1, last.Load()+int64(lostAfterHeartbeats*every)+1)
			if !pinging.Load() {
				next = min(next, max(a, echoFrom)+int64(pingEvery))
			}
			timer.Reset(max(time.Duration(next-time.Now().UnixNano()), time.Millisecond))
		}
	}
}

// streamRecovered runs when the stream's heartbeat comes back after a loss:
// a round trip through Redis has just succeeded. An outage doubles the
// breaker's open interval (up to Breaker.MaxOpenTimeout, 30 s) and each
// ejected node's probe interval (up to Cluster.MaxProbeInterval, 1 s), so
// without this the tier would go on bypassing Redis for up to that long
// after it came back, and the Cache serve last-known-good values that announcements
// queued meanwhile have made old. Both are cut short: the breaker's probes
// and the nodes' go out now, and each must still succeed.
func (t *Tier) streamRecovered() {
	t.br.Recovered()
	if t.nodes != nil {
		t.nodes.probeEjectedNow()
	}
}

// heartbeat publishes one heartbeat on hb, bounded by WriteTimeout, and
// reports whether the server took it. In a Cluster the client sends it to
// a node of its choice: the heartbeats of a process cross the cluster bus
// from every node in turn.
func (t *Tier) heartbeat(ctx context.Context, hb string, now time.Time) bool {
	ctx, cancel := context.WithTimeout(ctx, t.opts.WriteTimeout)
	defer cancel()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(now.UnixNano()))
	return t.client.Do(ctx, t.client.B().Publish().Channel(hb).Message(string(b[:])).Build()).Error() == nil
}

// streamAddr is the node the attempt-th subscription goes to: any node of
// a Cluster not ejected (the bus brings every message to each), at random,
// but not prev, the one the last subscription gave up on, while another is
// left (a frozen node is not ejected without reads to find it out, and a
// second try on it costs another second unheard); the server of a
// standalone one; a Sentinel group's primary.
func (t *Tier) streamAddr(attempt int, prev string) string {
	if t.sentinel != nil {
		return t.Primary()
	}
	if t.nodes != nil {
		addrs := t.nodes.liveAddrs()
		if len(addrs) > 1 {
			addrs = slices.DeleteFunc(slices.Clone(addrs), func(a string) bool { return a == prev })
		}
		if len(addrs) > 0 {
			return addrs[rand.IntN(len(addrs))]
		}
	}
	return t.opts.Addrs[attempt%len(t.opts.Addrs)]
}

// subscriber is a client of addr's alone for one subscription, or nil when
// one cannot be made.
func (t *Tier) subscriber(addr string) rueidis.Client {
	c, err := rueidis.NewClient(singleNodeOption(t.opts, addr))
	if err != nil {
		return nil
	}
	return c
}
