package simulation

import (
	"strings"
	"testing"
)

// regressions are seeds that once failed, each kept with what it found so that the bug cannot
// come back unseen. They run in `make test` and `make test-sim` (one seed costs well under a
// second), whatever stretch of seeds a run explores.
var regressions = []struct {
	seed  uint64
	name  string
	found string
	skip  string // why it cannot pass yet ("" when it must)
}{
	{
		// The engine's schedule has changed since: the seed now passes without the fix too, so
		// on its own it no longer proves the removal-slot hand-off; an engine script that
		// queues removals out of turn does (testdata/cleanup_queue in internal/engine).
		seed: 11716,
		name: "cleanup-stranded-in-removal-queue",
		found: "did not settle: task/sim-11 stayed CLEANING with no removal in flight; the freed removal " +
			"slots had gone to tasks whose wait-queue entries were stale (they had got slots out of turn), " +
			"so once no removal was in flight nothing woke the task left in the queue",
	},
	{
		// Also proven by the engine script testdata/create_in_flight.
		seed: 892150002569,
		name: "removal-before-a-create-retry-answered",
		found: "RUN TWICE: the runtime created 2 containers for 1 in valid tasks: a create timed out, its retry was " +
			"still out when the task was stopped, acknowledged and cleaned; the removal found nothing by name, then " +
			"the retry made a container that outlived the task",
	},
}

// TestSimRegressions replays every seed that once failed; each must now settle with every
// check holding.
func TestSimRegressions(t *testing.T) {
	for _, reg := range regressions {
		t.Run(reg.name, func(t *testing.T) {
			if reg.skip != "" {
				t.Skip(reg.skip)
			}
			if r := runSeed(t, reg.seed); r.Failure != "" {
				t.Errorf("seed %d fails again (it once found: %s): %s\nreplay: go test ./internal/simulation -run 'TestSim$' -seed %d -v\nthe steps about it:\n%s",
					reg.seed, reg.found, r.Failure, reg.seed, strings.Join(r.Focus, "\n"))
			}
		})
	}
}
