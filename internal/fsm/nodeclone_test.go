package fsm

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// A clone goes its own way: stepping it leaves the original's projection, calls out and
// Ready as they were, and a Node with a field Clone does not know fails here.
func TestNodeCloneCopiesEveryField(t *testing.T) {
	known := map[string]bool{"st": true, "cfg": true, "rd": true, "calls": true, "dirty": true, "wakes": true,
		"exits": true, "quarantine": true, "images": true, "recon": true, "compacting": true}
	for _, f := range reflect.VisibleFields(reflect.TypeOf(Node{})) {
		if !known[f.Name] {
			t.Errorf("Node.%s is new: Clone (nodeclone.go) must copy it, then list it here", f.Name)
		}
	}
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	n := NewNode(New(), NodeConfig{Config: Config{CleanupWait: time.Minute}})
	_ = n.Step(now, OwnRecord{Event: &event.AgentStarted{AgentID: "a", JournalID: "J"}})
	_ = n.Step(now, RuntimeObserved{})
	raw, _ := json.Marshal(map[string]any{"arn": "t1", "desired_status": "RUNNING", "containers": []any{map[string]any{"name": "c1", "image": "web:1"}}})
	_ = n.Step(now, PayloadArrived{MessageID: "m-1", Tasks: []json.RawMessage{raw}})
	_ = n.Step(now, Tick{})
	pull := n.Ready().Actions
	_ = n.Step(now, Advance{})
	before, _ := n.State().Snapshot()

	c := n.Clone()
	_ = c.Step(now, ActionFinished{Action: pull[0], Result: Result{Kind: Succeeded}})
	_ = c.Step(now, Tick{})
	if len(c.Ready().Actions) != 1 || c.Ready().Actions[0].Kind != ActCreate {
		t.Fatalf("the clone's pull answered, it decides %v, not the create", c.Ready().Actions)
	}
	_ = c.Step(now, Advance{})
	if after, _ := n.State().Snapshot(); string(after) != string(before) {
		t.Fatal("stepping the clone changed the original's projection")
	}
	if !n.calls.out.Has(pull[0].Key()) || n.calls.out.Has(ActionKey{Kind: ActCreate, Task: "t1", Container: "c1"}) || n.HasReady() {
		t.Fatal("stepping the clone changed the original's calls out or Ready")
	}
}
