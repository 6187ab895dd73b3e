//go:build plantedbugs

package simulation

import (
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// With the StartInFlight and RuntimeStartCheck guards off (internal/guard), starts are not journaled as intents and the runtime
// does not refuse a second start — the agent issue 13 found, which re-ran an exited container
// when the commit holding its start's outcome failed. The simulation must find a container
// started twice within a bounded number of seeds.
func TestSimFindsTheRerunBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.StartInFlight, guard.RuntimeStartCheck); why != "" {
		t.Skip(why)
	}
	if why := guard.SkipUnlessOff(guard.StartInFlight, guard.RuntimeStartCheck); why != "" {
		t.Skip(why)
	}
	findsPlantedBug(t, "RUN TWICE", 300)
}
