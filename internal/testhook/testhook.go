// Package testhook lets this repository's tests, benchmarks and lab
// outside package holdfast see what a Cache does not export, because no user needs
// it: whether a key's fetch is still in progress after its readers were
// answered (the shared-tier write follows the answer), and whether the
// invalidation stream is heard. A test that goes on to break the tier or
// move the clock waits for these first.
package testhook

import "time"

// Loading reports whether a fetch of key is in progress in ns, a
// *holdfast.Namespace, its shared-tier write included. Package holdfast
// sets it when it is initialized.
var Loading func(ns any, key string) bool

// StreamHeard reports whether c, a *holdfast.Cache, has an invalidation
// stream and hears it: it has heard it since it last broke, and since the
// Cache began. Package holdfast sets it.
var StreamHeard func(c any) bool

// SeedHot makes the hot tier of ns, a *holdfast.Namespace, hash keys from
// seed, so that a replay of the same reads evicts the same keys in every
// run (the hit-ratio comparison's). Call it before ns is read. Package
// holdfast sets it.
var SeedHot func(ns any, seed uint64)

// StreamHeardAt is when c, a *holdfast.Cache, last heard its stream, by
// its clock: a test that needs the copies it holds vouched for by a
// heartbeat waits for one. Package holdfast sets it.
var StreamHeardAt func(c any) time.Time
