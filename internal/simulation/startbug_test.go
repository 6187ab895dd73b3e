//go:build startbug

package simulation

import "testing"

// Built with -tags startbug, the projection may declare a container STOPPED while its start is
// in flight (issue 13's first broken promise). The simulation must find it — a container
// STOPPED in the journal that the runtime runs — within a bounded number of seeds.
func TestSimFindsTheStartBug(t *testing.T) { findsPlantedBug(t, "STOPPED BUT RUNNING", 200) }
