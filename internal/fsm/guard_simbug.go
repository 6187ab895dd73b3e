//go:build simbug

package fsm

// ackGuard off: the seed's bug planted, for the simulation to find (make test-sim). Never
// built without -tags simbug.
const ackGuard = false
