//go:build !corebug

package fsm

// settleRule is the core's rule that a task becomes STOPPED_ACKED only once its STOPPED change
// is settled. It is a constant so that a build made without it (go test -tags corebug) plants
// a core that makes a record the projection refuses, to prove the engine never journals such
// a record (engine/quarantine.go), while no production build can switch it off.
const settleRule = true
