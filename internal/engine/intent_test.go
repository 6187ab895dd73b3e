package engine_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// TestACallWhoseIntentIsRefusedIsNeverMade: a start goes only once its call_started is
// journaled (journal first, then act). Should the core decide a start the projection refuses
// to record — here, for a container already RUNNING — the record is dropped and the task
// quarantined (quarantine.go), and the start must not leave either: nothing journaled says
// it was made, so after a restart nothing would know.
func TestACallWhoseIntentIsRefusedIsNeverMade(t *testing.T) {
	r := newRig(t, time.Hour)
	r.assign("task/a", "RUNNING", ctr("app"))
	r.advance(time.Second)
	if r.known("task/a") != event.StatusRunning {
		t.Fatalf("task/a is %s, want RUNNING", r.known("task/a"))
	}
	id := r.task("task/a").Container("app").RuntimeID
	started := len(r.records("task/a", event.TypeCallStarted))
	ready := r.e.Dispatch(fsm.Action{Kind: fsm.ActStart, Task: "task/a", Container: "app", RuntimeID: id})
	if len(ready.Actions) != 0 {
		t.Fatalf("released a start whose call_started the projection refused:\n%s", ready)
	}
	if n := len(r.records("task/a", event.TypeCallStarted)); n != started {
		t.Fatalf("%d call_started journaled, want %d (the refused one dropped)", n, started)
	}
	if r.e.Quarantined("task/a") == "" {
		t.Fatal("task/a not quarantined after its record was refused")
	}
	r.advance(time.Second) // the next decisions: the call is not out, and nothing waits on it
	if r.known("task/a") != event.StatusRunning {
		t.Fatalf("task/a is %s after the refused start, want RUNNING", r.known("task/a"))
	}
}
