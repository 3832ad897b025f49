package redis

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/holdfast-dev/holdfast/tier"
)

// Read leveling in Cluster mode (tier.Leveler). Reads spread evenly over a
// shard's ready nodes (routing.go), but shards are not even with each
// other: a shard that lost one of its two nodes (ejected, failed over, a
// replica resyncing) serves all of its reads from the node it has left,
// twice what a whole shard's nodes each serve, and the shards holding the
// most popular keys carry more than the rest. A node that carries twice
// the others' share is the one that saturates first, and when a fifth of a
// fleet is lost at peak, a dozen such nodes carry the fleet.
//
// The Cache holds many of those keys already, in copies as good as the
// node's (it decides which; see tier.Leveler). So every levelEvery the tier
// measures, per shard, the reads its nodes were sent and the reads it shed, over
// about a second, and how many of them the Cache asked to shed (the reads
// it could answer from memory); it finds the per-node load c that the
// nodes would carry if no node carried more than LevelAbove times the mean
// of all, and sets each shard's shed share to what takes its nodes down to
// c: the share of the reads asked that covers its excess. Shed then
// answers yes with that probability. A shard whose reads the Cache cannot
// answer from memory keeps its excess; one at or below c sheds nothing.
// Measuring demand (the reads sent plus those shed), not the reads sent,
// keeps the share from swinging: shedding lowers what is sent, never what
// is asked for.

const (
	// levelEvery is how often the shed shares are worked out again.
	levelEvery = 250 * time.Millisecond
	// levelWeight is the weight of the last interval in the moving
	// averages: about a second of reads.
	levelWeight = 0.25
	// levelGain is the part of the measured error a shard's correction
	// takes each interval.
	levelGain = 0.3
	// levelMinPerNode is the mean rate, in reads a second per node, below
	// which nothing is shed: a tier that idles has no node to spare.
	levelMinPerNode = 10
	// shedOne is a shed share of 1 (node.shedShare is in 1/shedOne).
	shedOne = 1 << 16
)

// sentNoise is the standard deviation of a node's measured rate (its
// moving average of reads a second), per square root of the rate: reads
// that arrive at random give each interval's count a variance equal to
// its mean, and the moving average keeps levelWeight/(2-levelWeight) of
// an interval's variance.
var sentNoise = math.Sqrt(levelWeight / (2 - levelWeight) / levelEvery.Seconds())

// maxOfNormal[k] is the expected largest of k independent standard normal
// draws: how far, in standard deviations, the busiest of k evenly loaded
// nodes is measured above their mean by noise alone.
var maxOfNormal = [...]float64{0, 0, 0.5642, 0.8463, 1.0294, 1.1630, 1.2672, 1.3522, 1.4236}

// noiseAbove is how far the busiest of a shard's live nodes, measured at
// rate busiest, reads above the others by chance alone.
func noiseAbove(live, busiest float64) float64 {
	k := min(int(live), len(maxOfNormal)-1)
	return maxOfNormal[k] * sentNoise * math.Sqrt(busiest)
}

var _ tier.Leveler = (*Tier)(nil)

// levelState is a node's moving averages, and, on a shard's primary, the
// shard's: kept by the node, so that they outlast slot map refreshes (a
// failover starts the shard's anew).
type levelState struct {
	round              uint64 // nodeSet.levelRound when last measured
	reads, asked, shed uint64 // the counters then
	// sent is the requests a second the node answered or failed: a node
	// that fails its reads (frozen, not yet ejected; slow past the read
	// budget) is sent them all the same, and counting only its answers
	// would make its shard look idle and every other one busy.
	sent float64
	// On a shard's primary: the Shed calls a second, those answered yes,
	// and the correction to the modelled shed share (see level).
	askedAvg, shedAvg, corr float64
}

// Shed implements tier.Leveler: it reports, for a read of key the Cache
// could answer from memory, whether the key's shard carries more than its
// share of reads now (see level.go). Always false for a standalone server,
// with per-node health Disabled, or with ClusterOptions.LevelAbove
// negative.
func (d *tierDriver) Shed(key string) bool {
	t := (*Tier)(d)
	s := t.nodes
	if s == nil || s.o.LevelAbove < 0 {
		return false
	}
	tp := s.topo.Load()
	si := tp.slots[slotOf(t.opts.KeyPrefix, key)]
	if si < 0 {
		return false
	}
	p := tp.shards[si].nodes[0]
	p.levelAsked.add(1)
	share := p.shedShare.Load()
	if share == 0 || rand.Uint32N(shedOne) >= share {
		return false
	}
	p.levelShed.add(1)
	return true
}

// level works out every shard's shed share from the reads since the last
// call, dt ago. It runs on the node set's loop.
//
// The share has two parts. The model's: from each shard's demand, the
// per-node load c that no node exceeds once every shard above it sheds
// what takes it down to c, and the share of the shard's asked reads that
// is. It follows a loss at once, but it assumes a shard's reads spread
// evenly over its nodes and are all of its own keys, and neither holds
// quite: a hot key's copies (smear.go) are read from primaries only,
// whatever shard the key is in. So a correction, added to it, moves each
// interval by a part of what would bring the shard's busiest node to
// LevelAbove times the mean of the nodes as measured.
func (s *nodeSet) level(dt time.Duration) {
	tp := s.topo.Load()
	defer func() { s.levelRound++ }()
	secs := dt.Seconds()
	avg := func(avg *float64, now, before uint64) {
		v := float64(now-before) / secs
		if now < before {
			v = 0
		}
		*avg += levelWeight * (v - *avg)
	}
	// Each node's reads, and each primary's asks and sheds.
	for _, n := range tp.nodes {
		st := &n.level
		reads, asked, shed := n.reads.load()+n.failures.load(), n.levelAsked.load(), n.levelShed.load()
		if st.round != s.levelRound {
			// Not measured last interval (new to the map, or back in
			// it): its averages start anew from this interval.
			*st = levelState{reads: reads, asked: asked, shed: shed}
		}
		st.round = s.levelRound + 1
		avg(&st.sent, reads, st.reads)
		avg(&st.askedAvg, asked, st.asked)
		avg(&st.shedAvg, shed, st.shed)
		st.reads, st.asked, st.shed = reads, asked, shed
	}
	type shardLoad struct {
		primary       *node
		live          float64 // nodes taking reads
		sent, busiest float64 // reads a second: of all its nodes, of its busiest live node
		demand, ask   float64 // reads a second: sent and shed, and asked to shed
	}
	loads := make([]shardLoad, 0, len(tp.shards))
	var nodes, demand, sent float64
	for _, sh := range tp.shards {
		p := sh.nodes[0]
		l := shardLoad{primary: p, ask: p.level.askedAvg}
		for _, n := range sh.nodes {
			l.sent += n.level.sent
			if !n.ejected.Load() && n.ready.Load() {
				l.live++
				l.busiest = max(l.busiest, n.level.sent)
			}
		}
		if l.live == 0 {
			p.shedShare.Store(0) // its reads are bypassed: nothing to level
			p.level.corr = 0
			continue
		}
		l.demand = l.sent + p.level.shedAvg
		loads = append(loads, l)
		nodes += l.live
		demand += l.demand
		sent += l.sent
	}
	if nodes == 0 || demand/nodes < levelMinPerNode {
		for _, l := range loads {
			l.primary.shedShare.Store(0)
			l.primary.level.corr = 0
		}
		return
	}
	// The model: c = LevelAbove × the mean after shedding, a fixed point
	// found by iterating from the mean before. A shard sheds at most the
	// reads the Cache could answer from memory.
	after := func(l shardLoad, c float64) float64 {
		d := l.demand / l.live
		if d <= c {
			return d
		}
		return max(c, d*(1-min(1, l.ask/l.demand)))
	}
	c := s.o.LevelAbove * demand / nodes
	for range 8 {
		var sum float64
		for _, l := range loads {
			sum += l.live * after(l, c)
		}
		c = s.o.LevelAbove * sum / nodes
	}
	target := s.o.LevelAbove * sent / nodes // the bound, as the nodes are now
	for _, l := range loads {
		st := &l.primary.level
		model := 0.0
		if d := l.demand / l.live; d > c && l.ask > 0 {
			model = min(1, (d-c)*l.live/l.ask)
		}
		if l.ask > 0 && l.busiest > 0 {
			// Shedding a share x of the asked reads takes about
			// x·ask·busiest/sent off the busiest node. The busiest of
			// two evenly loaded nodes reads above their mean by chance
			// (at 25 reads a second, by about a tenth): taken as load,
			// that ratcheted the correction up on every shard of an
			// even Cluster until it shed most of what it could, and a
			// frozen node's ejector then saw too few of its reads fail
			// to eject it within a second. So the noise expected of the
			// busiest node is taken off; a shard down to one node has
			// none to take off, and its correction acts in full (a dead
			// band instead, two standard deviations wide, left the
			// busiest node of a fleet that lost a fifth of its nodes at
			// 1.23 times the mean).
			excess := l.busiest - noiseAbove(l.live, l.busiest) - target
			st.corr += levelGain * excess / l.busiest * l.sent / l.ask
		}
		share := min(1, max(0, model+st.corr))
		st.corr = share - model // no more correction than the share can take
		l.primary.shedShare.Store(uint32(share * shedOne))
	}
}
