// Package tierdriver names, in one interface, everything a full shared
// tier does for the Cache. redis.Tier and redis.Lazy carry these methods
// through an embedded field of this type, so that they satisfy every
// optional interface of package tier while their documentation lists only
// what the people who configure and watch them call: go doc shows the
// methods a type promotes from an embedded field only when it can see the
// field's type in the same package.
package tierdriver

import "github.com/holdfast-dev/holdfast/tier"

// Driver is a shared tier with every optional capability.
type Driver interface {
	tier.OverRefiller
	tier.VersionedGetter
	tier.Smearer
	tier.HotSharer
	tier.InvalidationStream
	tier.HealthReporter
}
