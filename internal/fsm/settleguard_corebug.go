//go:build corebug

package fsm

// settleRule off: the core makes stopped_acked for a STOPPED task whose change is not settled,
// which the projection refuses (make test-sim). Never built without -tags corebug.
const settleRule = false
