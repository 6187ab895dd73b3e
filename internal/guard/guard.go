// Package guard is every safety guard a test may plant a bug by switching off, in one place.
// Each is on in every build; only a test binary built with -tags plantedbugs can switch one
// off (planted.go, from AGENTD_PLANTED_BUGS), so a test that must fail without a guard can show
// that it does — a suite that still passed with a guard gone would prove nothing about it.
// It protects: no production build runs with a guard off (TestEveryGuardIsOnInADefaultBuild).
package guard

// Name names one guard. Each comment states the invariant the guard keeps and the tests that
// prove it bites (they fail with it off).
type Name string

const (
	// CleanupAfterAck: CLEANING only from STOPPED_ACKED — a container is removed only after
	// the control plane accepted its task's STOPPED (docs/design.md, the cleanup guard).
	// Bites: simulation TestSimFindsTheSeedBug, engine TestScriptsFailWithoutTheGuard,
	// explore TestExplorerFindsEveryPlantedBug/cleanup-after-ack.
	CleanupAfterAck Name = "cleanup-after-ack"
	// StartInFlight: a container whose start is out (journaled as an intent) is never declared
	// STOPPED, and the start is journaled before it is made — no task reported STOPPED while
	// its container runs. Bites: simulation TestSimFindsTheStartBug (with RuntimeStartCheck:
	// TestSimFindsTheRerunBug), explore TestExplorerFindsEveryPlantedBug/start-in-flight.
	StartInFlight Name = "start-in-flight"
	// ImageInUse: image collection never chooses an image a task not yet cleaned uses.
	// Bites: simulation TestSimFindsTheImageBug, explore TestExplorerFindsEveryPlantedBug/image-in-use.
	ImageInUse Name = "image-in-use"
	// CallWaits: an inspect never overtakes the start it settles, nor a removal the create
	// still out (fsm Gate's waitsFor). Bites: fsm TestPropertyFindsTheWaitsBug, explore
	// TestExplorerFindsEveryPlantedBug/call-waits; simulation TestSimFindsTheWaitsBug with
	// LateStartFence off too (the fence stands behind it).
	CallWaits Name = "call-waits"
	// SettleRule: the core makes stopped_acked only for a task whose STOPPED change is
	// settled; with it off the core makes a record the projection refuses, which must never
	// be journaled. Bites: engine TestRefusedRecordIsNeverJournaled, introspect
	// TestAQuarantinedTaskIsShownAndNamed, explore TestExplorerFindsEveryPlantedBug/settle-rule.
	SettleRule Name = "settle-rule"
	// RuntimeStartCheck: both runtimes refuse to start a container that has run
	// (runtime.CheckStart) — no container started twice. Bites: simruntime
	// TestRuntimeBugStartsAnExitedContainerAgain, simulation TestSimFindsTheRerunBug (with
	// StartInFlight), explore TestExplorerFindsEveryPlantedBug/runtime-start-check.
	RuntimeStartCheck Name = "runtime-start-check"
	// LateStartFence: a CREATED container whose start was asked (call_started) is declared
	// STOPPED without having run only after a fence — a remove that is not forced — removed
	// it, so that a start asked earlier (by a process that died, a call whose answer was lost)
	// cannot land after its STOPPED is reported — or, while its task runs on, before it is made
	// again as a new container; a second start asked of a container is not followed by a
	// third. Bites: explore TestExplorerFindsEveryPlantedBug/late-start-fence, engine
	// TestScriptsFailWithoutTheGuard (the explorer's late start and failed restart, made_again).
	LateStartFence Name = "late-start-fence"
)

// All is every guard.
var All = []Name{CleanupAfterAck, StartInFlight, ImageInUse, CallWaits, SettleRule, RuntimeStartCheck, LateStartFence}

// Env names the guards a -tags plantedbugs test binary runs with switched off; any other
// build ignores it.
const Env = "AGENTD_PLANTED_BUGS"

// off is the guards switched off: written only by planted.go, which no build without
// -tags plantedbugs contains.
var off = map[Name]bool{}

// On reports whether a guard is on: always, but in a -tags plantedbugs test binary told
// otherwise.
func On(n Name) bool { return !off[n] }

// SkipUnlessOff is the message of a test that proves a guard bites when the guard is on ("":
// every guard named is off, and the test runs).
func SkipUnlessOff(names ...Name) string {
	for _, n := range names {
		if On(n) {
			return "needs a test binary built with -tags plantedbugs, run with " + Env + " naming " + string(n)
		}
	}
	return ""
}
