package fsm_test

import (
	"maps"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// The task's steps on its way up are read from the machine table, not written again: a table
// that lost a forward edge (or gained a skip) would change what Decide moves a task to.
func TestNextUpComesFromTheTaskTable(t *testing.T) {
	want := map[event.Status]event.Status{
		event.StatusNone: event.StatusPulled, event.StatusPulled: event.StatusCreated, event.StatusCreated: event.StatusRunning,
	}
	if !maps.Equal(fsm.NextUp, want) {
		t.Fatalf("nextUp = %v; want %v", fsm.NextUp, want)
	}
}
