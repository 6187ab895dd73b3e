//go:build plantedbugs

package simulation

import (
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// With the StartInFlight guard off (internal/guard), the projection may declare a container STOPPED while its start is
// in flight (issue 13's first broken promise). The simulation must find it — a container
// STOPPED in the journal that the runtime runs — within a bounded number of seeds.
func TestSimFindsTheStartBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.StartInFlight); why != "" {
		t.Skip(why)
	}
	if why := guard.SkipUnlessOff(guard.StartInFlight); why != "" {
		t.Skip(why)
	}
	findsPlantedBug(t, "STOPPED BUT RUNNING", 200)
}
