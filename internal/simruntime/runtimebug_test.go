//go:build plantedbugs

package simruntime

import (
	"context"
	"testing"

	"github.com/agentd/agentd/internal/guard"
)

// With the RuntimeStartCheck guard off (internal/guard) the guard is gone and Start behaves as Docker's API does: an exited
// container runs again. This proves the tag puts the old behaviour back, so a test that must
// fail under it (the simulation's at-most-one-incarnation invariant) can show it would.
func TestRuntimeBugStartsAnExitedContainerAgain(t *testing.T) {
	if why := guard.SkipUnlessOff(guard.RuntimeStartCheck); why != "" {
		t.Skip(why)
	}
	s, c := newTestRuntime(t)
	id := run(t, s, "task/once", "exit", "3")
	c.add(1)
	if err := s.Start(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if got := s.Reruns(); len(got) != 1 {
		t.Fatalf("reruns %v; with the guard compiled out the container runs again", got)
	}
}
