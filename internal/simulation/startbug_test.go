//go:build startbug

package simulation

import (
	"strings"
	"testing"
)

// Built with -tags startbug, the projection may declare a container STOPPED while its start is
// in flight (issue 13's first broken promise). The simulation must find it — a container
// STOPPED in the journal that the runtime runs — within a bounded number of seeds.
func TestSimFindsTheStartBug(t *testing.T) {
	const bound = 200
	for s := uint64(1); s <= bound; s++ {
		if r := runSeed(t, s); strings.HasPrefix(r.Failure, "STOPPED BUT RUNNING") {
			t.Logf("seed %d finds the planted bug after %d steps: %s", s, r.Steps, r.Failure)
			return
		}
	}
	t.Fatalf("the simulation did not find the planted bug in %d seeds", bound)
}
