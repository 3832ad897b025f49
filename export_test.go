package holdfast

// Loading reports whether a fetch of key is in progress in this process,
// its shared-tier write included. Readers do not wait for that write; tests
// that go on to break the tier or move the clock can wait for it with this.
func (n *Namespace) Loading(key string) bool { return n.flights.inProgress(key) }

// StreamHeard reports whether the Cache has an invalidation stream and
// hears it.
func (c *Cache) StreamHeard() bool { return c.streamHeard() }

// LoadsInFlight reports how many loader calls hold a slot of the
// cache-wide load limit now.
func (c *Cache) LoadsInFlight() int { return c.limit.inUse() }

// The defaults the tests compare with.
const (
	DefaultTTL              = defaultTTL
	DefaultNegativeTTL      = defaultNegativeTTL
	DefaultHotTTL           = defaultHotTTL
	DefaultLoadErrorBackoff = defaultLoadErrorBackoff
	DefaultSlowLoadGrace    = defaultSlowLoadGrace
)

// MaxWatermarks is how many keys' invalidation watermarks a namespace
// keeps before it forgets the oldest.
const MaxWatermarks = maxWatermarks

// IdleWorkers is how many of the Cache's goroutines wait for work.
func (c *Cache) IdleWorkers() int { return int(c.idlers.Load()) }

// MaxIdleWorkers is the most goroutines that wait for work at once.
const MaxIdleWorkers = maxIdleWorkers
