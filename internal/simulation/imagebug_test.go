//go:build plantedbugs

package simulation

import (
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// With the ImageInUse guard off (internal/guard), image collection may choose an image that a task not yet cleaned
// uses. The simulation must find it — an image of a live task gone from the runtime — within a
// bounded number of seeds.
func TestSimFindsTheImageBug(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.ImageInUse); why != "" {
		t.Skip(why)
	}
	if why := guard.SkipUnlessOff(guard.ImageInUse); why != "" {
		t.Skip(why)
	}
	findsPlantedBug(t, "IMAGE OF A LIVE TASK REMOVED", 200)
}
