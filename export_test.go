package holdfast

// InFlight reports whether a flight for key is running, for tests that must
// wait for a load's shared-tier write, which readers do not wait for.
func (n *Namespace) InFlight(key string) bool { return n.flights.inProgress(key) }
