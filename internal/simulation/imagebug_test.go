//go:build imagebug

package simulation

import "testing"

// Built with -tags imagebug, image collection may choose an image that a task not yet cleaned
// uses. The simulation must find it — an image of a live task gone from the runtime — within a
// bounded number of seeds.
func TestSimFindsTheImageBug(t *testing.T) { findsPlantedBug(t, "IMAGE OF A LIVE TASK REMOVED", 200) }
