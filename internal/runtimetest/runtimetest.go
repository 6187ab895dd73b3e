// Package runtimetest is the contract every agentd container runtime keeps — runtime.Runtime
// — written once as tests any runtime runs: the
// simulated runtime (package simruntime) runs them in every `go test`, the Docker Engine
// runtime with AGENTD_DOCKER_TESTS=1 (after `make testbox-image`).
//
// A behaviour belongs here when the agent relies on it whichever runtime it drives: the
// projection and the simulation are only as true as the simulated runtime is to Docker, so
// every test of this package must pass on both, and fail on either when the promise breaks
// (with the RuntimeStartCheck guard off, internal/guard, AContainerThatRanIsNeverStartedAgain
// fails on both). What only one runtime can show (Docker's kernel limits, the simulation's
// planted faults) stays with that runtime's own tests.
//
// The tests wait on the runtime's own events (the exit and health streams, a followed log),
// each wait bounded; none depends on how fast the runtime is.
package runtimetest

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/runtime"
)

// Engine is one engine under test, made afresh for each test.
type Engine struct {
	// Image is an image the engine holds whose containers obey testbox's words
	// (testdata/testbox: run, exit CODE, linger D, serve PORT, probe PORT, …).
	Image string
	// Open returns the runtime of agent on this engine. Every runtime Open returns within one
	// test shares the engine: what one agent made, a runtime opened after it for another agent
	// sees on the engine (and must leave alone). Open cleans up after itself when t ends.
	Open func(t *testing.T, agent string) runtime.Runtime
}

// Run runs every contract test against engines newEngine makes, one a test.
func Run(t *testing.T, newEngine func(t *testing.T) Engine) {
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) {
			c.test(t, newSubject(t, newEngine(t)))
		})
	}
}

// RunHealth runs the health contract alone: for a runtime's second way of checking health (the
// agent's own checks, on an engine that runs them too), beside Run of its first.
func RunHealth(t *testing.T, newEngine func(t *testing.T) Engine) {
	healthChecksReachTheirVerdicts(t, newSubject(t, newEngine(t)))
}

// contract is every promise, by name; each test is in contract.go.
var contract = []struct {
	name string
	test func(t *testing.T, s *subject)
}{
	{"CreateIsIdempotentAndFoundByLabels", createIsIdempotentAndFoundByLabels},
	{"ExitCodesReachInspectAndTheExitStream", exitCodesReachInspectAndTheExitStream},
	{"StopEndsAContainerAsItsSignalAndTimeoutSay", stopEndsAContainerAsItsSignalAndTimeoutSay},
	{"AContainerThatRanIsNeverStartedAgain", aContainerThatRanIsNeverStartedAgain},
	{"AStopBeforeTheStartIsLost", aStopBeforeTheStartIsLost},
	{"RemoveTakesTheContainerAndAgainSucceeds", removeTakesTheContainerAndAgainSucceeds},
	{"ARemoveUnlessStartedFencesAStart", aRemoveUnlessStartedFencesAStart},
	{"AnUnknownContainerIsNotFound", anUnknownContainerIsNotFound},
	{"OtherAgentsContainersAreNeverTouched", otherAgentsContainersAreNeverTouched},
	{"HealthChecksReachTheirVerdicts", healthChecksReachTheirVerdicts},
	{"PublishedPortsAreReportedAsBound", publishedPortsAreReportedAsBound},
	{"LogsCarryWhatTheContainerWrote", logsCarryWhatTheContainerWrote},
	{"PullsFollowThePolicy", pullsFollowThePolicy},
}

// wait bounds every wait of the suite: far beyond what any runtime takes, short enough that a
// runtime that never answers fails the test rather than hangs it.
const wait = 30 * time.Second

// agents numbers the agent ids of one process, so no two tests share one on a shared engine.
var agents atomic.Int64

// agentID is a fresh agent id: unique on the engine (the process id and the time keep apart
// test processes sharing one engine), readable in `docker ps`.
func agentID(role string) string {
	return fmt.Sprintf("contract-%d-%d-%d-%s", os.Getpid(), time.Now().UnixNano()%1e6, agents.Add(1), role)
}
