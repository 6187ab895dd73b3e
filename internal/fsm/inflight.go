//go:build !startbug

package fsm

// inFlightGuard keeps a container whose start is in flight from being declared STOPPED. It is
// a constant so that the simulation can prove it finds the old bug in a build made without
// it (go test -tags startbug), while no production build can switch it off.
const inFlightGuard = true
