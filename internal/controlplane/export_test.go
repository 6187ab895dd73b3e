package controlplane

// What the tests read of the throttle's insides; the server never needs it.

// Turns is how many clients hold a turn not yet claimed.
func (t *Throttle) Turns() int { return len(t.turns) }
