package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// TestAContainerFoundRunningAfterARestartReportsItsPorts: a RUNNING change carries the ports
// the runtime bound (PROTOCOL.md §4). When the agent dies after a start was made but before
// its outcome was journaled, the restart finds the container running; the RUNNING it then
// records must carry the bound ports too, or the control plane never learns them.
func TestAContainerFoundRunningAfterARestartReportsItsPorts(t *testing.T) {
	r := newRig(t, time.Hour)
	web := ctr("web")
	web.Ports = []event.PortMapping{{ContainerPort: 80, Protocol: "tcp"}}
	ctx := context.Background()
	raw, _ := json.Marshal(protocol.Task{ARN: "task/web", DesiredStatus: "RUNNING", Containers: []protocol.Container{web}})
	r.e.Step(ctx, engine.PayloadInput{Payload: protocol.Payload{MessageID: "m-web", Tasks: []json.RawMessage{raw}}})
	for started := false; !started; {
		f := r.exec.Next()
		if f == nil {
			t.Fatal("no start was made")
		}
		in := f()
		if ar, ok := in.(engine.ActionResult); ok && ar.Action.Kind == fsm.ActStart {
			started = true // made; the agent dies before its outcome is journaled
			continue
		}
		r.e.Step(ctx, in)
	}
	r.crash()
	r.advance(time.Second)
	var running []event.Record
	for _, rec := range r.records("task/web", event.TypeContainerTransitioned) {
		if ct := rec.Event.(*event.ContainerTransitioned); ct.To == event.StatusRunning {
			running = append(running, rec)
		}
	}
	if len(running) != 1 {
		t.Fatalf("%d RUNNING records, want 1", len(running))
	}
	ct := running[0].Event.(*event.ContainerTransitioned)
	if len(ct.NetworkBindings) != 1 || ct.NetworkBindings[0].ContainerPort != 80 || ct.NetworkBindings[0].HostPort == 0 {
		t.Fatalf("RUNNING found after the restart (%q) carries bindings %+v; want port 80's host port", ct.Reason, ct.NetworkBindings)
	}
}
