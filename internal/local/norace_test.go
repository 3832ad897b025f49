//go:build !race

package local

// RaceEnabled is whether the race detector is on, for the tests it slows
// past their worth.
const RaceEnabled = false
