//go:build startbug

package fsm

// inFlightGuard off: the old bug planted (a sibling whose start is out recorded "not
// started" while the start runs it), for the simulation to find (make test-sim). Never built
// without -tags startbug.
const inFlightGuard = false
