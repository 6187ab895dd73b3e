//go:build !simbug

package fsm

// ackGuard is the cleanup guard: CLEANING only from STOPPED_ACKED. It is a constant so that
// the simulation can prove it finds the seed's bug in a build made without it
// (go test -tags simbug), while no production build can switch it off.
const ackGuard = true
