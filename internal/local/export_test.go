package local

// Shards is how many shards s splits its budget over, for the external
// tests.
func Shards[V any](s *Store[V]) int { return len(s.shards) }

// MapEntryBytes is the index's share of an entry's cost.
const MapEntryBytes = mapEntryBytes

// SketchEntryBytes is the frequency sketch's share of an entry's cost.
const SketchEntryBytes = sketchEntryBytes
