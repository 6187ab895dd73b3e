//go:build plantedbugs

package simulation

import (
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// With the CallWaits guard off (internal/guard), the core lets an inspect go while the start it settles is out
// (and a removal while a create is): the inspect finds the container not started yet, the
// start's intent ends, a stopping task records it STOPPED "not started" — and the start then
// runs it. The late-start fence (LateStartFence) stands behind it: a container whose start was
// asked is removed unless it runs before it is called STOPPED, so the simulation sees the run
// only with both off (the property test and the explorer find CallWaits alone, as a record the
// projection refuses). The simulation must find a container STOPPED in the journal that the
// runtime runs within a bounded number of seeds.
func TestSimFindsTheWaitsBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.CallWaits, guard.LateStartFence); why != "" {
		t.Skip(why)
	}
	findsPlantedBug(t, "STOPPED BUT RUNNING", 300)
}
