//go:build race

package redis_test

// raceEnabled reports, in the chaos test's table, that the race detector
// slowed the run.
const raceEnabled = true
