//go:build startbug && runtimebug

package simulation

import (
	"strings"
	"testing"
)

// Built with -tags 'startbug runtimebug', starts are not journaled as intents and the runtime
// does not refuse a second start — the agent issue 13 found, which re-ran an exited container
// when the commit holding its start's outcome failed. The simulation must find a container
// started twice within a bounded number of seeds.
func TestSimFindsTheRerunBug(t *testing.T) {
	const bound = 300
	for s := uint64(1); s <= bound; s++ {
		if r := runSeed(t, s); strings.HasPrefix(r.Failure, "RUN TWICE") {
			t.Logf("seed %d finds the planted bug after %d steps: %s", s, r.Steps, r.Failure)
			return
		}
	}
	t.Fatalf("the simulation did not find the planted bug in %d seeds", bound)
}
