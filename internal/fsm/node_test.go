package fsm_test

import (
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
)

// A task whose record the projection refused is quarantined by the node: nothing more is
// decided for it — no record, no call — while the other tasks go on. Each case is a task the
// core would otherwise act on at once.
func TestTheNodeDecidesNothingForAQuarantinedTask(t *testing.T) {
	for _, desired := range []event.Status{event.StatusRunning, event.StatusStopped} {
		t.Run(string(desired), func(t *testing.T) {
			n := fsm.NewNode(fsm.New(), fsm.NodeConfig{})
			step := func(in fsm.Input) fsm.Ready {
				t.Helper()
				if err := n.Step(t0, in); err != nil {
					t.Fatal(err)
				}
				r := n.Ready()
				if err := n.Step(t0, fsm.Advance{}); err != nil {
					t.Fatal(err)
				}
				return r
			}
			added := func(arn string) fsm.Input {
				return fsm.Forced{Verdict: fsm.Verdict{Records: []event.Record{{Task: arn, Event: &event.TaskAdded{Desired: desired,
					Containers: []event.ContainerSpec{{Name: "app", Image: "web:3", Essential: true}}}}}}}
			}
			step(added("bad"))
			step(added("good"))
			r := step(fsm.Forced{Verdict: fsm.Verdict{Records: []event.Record{{Task: "bad", Container: "app",
				Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped}}}}})
			if len(r.Dropped) != 1 || n.Quarantined("bad") == "" {
				t.Fatalf("the refused record was not dropped and its task quarantined: %+v", r.Dropped)
			}
			r = step(fsm.Tick{})
			good := false
			for _, rec := range r.Records {
				good = good || rec.Task == "good"
				if rec.Task == "bad" {
					t.Fatalf("record decided for the quarantined task: %s", event.Describe(rec.Event))
				}
			}
			for _, a := range r.Actions {
				good = good || a.Task == "good"
				if a.Task == "bad" {
					t.Fatalf("call released for the quarantined task: %s", a.Key())
				}
			}
			if !good {
				t.Fatal("nothing decided for the healthy task either: the case proves nothing")
			}
		})
	}
}
