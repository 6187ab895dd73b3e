package fsm

import "github.com/agentd/agentd/internal/guard"

// The core's guards, each on in every build (internal/guard says which tests prove each one
// bites, and how a -tags plantedbugs test binary switches one off). Read once, at start: a
// guard is the same for the whole run, and the lifecycle tables (machine.go) are built from
// ackGuard.
var (
	// ackGuard: CLEANING only from STOPPED_ACKED.
	ackGuard = guard.On(guard.CleanupAfterAck)
	// inFlightGuard: a container whose start is in flight is never declared STOPPED, and a
	// start is journaled as an intent before it is made.
	inFlightGuard = guard.On(guard.StartInFlight)
	// imageGuard: image collection keeps off the images of tasks that are not cleaned.
	imageGuard = guard.On(guard.ImageInUse)
	// settleRule: a task becomes STOPPED_ACKED only once its STOPPED change is settled.
	settleRule = guard.On(guard.SettleRule)
	// fenceGuard: a CREATED container whose start was asked is fenced (removed unless it
	// runs) before it is declared STOPPED without having run, and started at most twice.
	fenceGuard = guard.On(guard.LateStartFence)
)

// waitsFor names, for an action, a call on the same container that must have answered before
// it goes: an inspect or a fence settles a start whose own outcome may still come; and a create still out
// (a retry of one that timed out) may yet make the container, which a removal made before it
// answers would miss — the container would outlive its task's cleanup. Empty only with the
// CallWaits guard off.
var waitsFor = callWaits()

func callWaits() map[ActionKind]ActionKind {
	if !guard.On(guard.CallWaits) {
		return map[ActionKind]ActionKind{}
	}
	return map[ActionKind]ActionKind{ActInspect: ActStart, ActFence: ActStart, ActRemove: ActCreate}
}
