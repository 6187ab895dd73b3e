package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// TestARefusedPayloadRecordIsNamedAfterARestart: should the core make, from a payload, a
// task_added the projection refuses, the record is never journaled (invariant 11) and the
// payload is acknowledged all the same (else the control plane re-sends it forever). Then a
// record_refused stands in for it, so after a restart the task is still named in the core
// slot with its payload — not lost in silence, the control plane believing the agent has it.
// The payload sent again is acknowledged and not applied twice; a later payload with the task
// is decided afresh.
func TestARefusedPayloadRecordIsNamedAfterARestart(t *testing.T) {
	r := newRig(t, time.Hour)
	r.assign("task/good", "RUNNING", ctr("app"))
	r.advance(time.Second)

	ready := refuseTaskAdded(r, "m-bad", "task/bad")
	if !slices.Contains(ready.Acks, "m-bad") {
		t.Fatalf("the payload is not acknowledged:\n%s", ready)
	}
	if n := len(r.records("task/bad", event.TypeTaskAdded)); n != 0 {
		t.Fatalf("%d refused task_added journaled", n)
	}
	refusals := r.records("task/bad", event.TypeRecordRefused)
	if len(refusals) != 1 {
		t.Fatalf("%d record_refused journaled for task/bad, want 1", len(refusals))
	}
	got := refusals[0].Event.(*event.RecordRefused)
	if got.MessageID != "m-bad" || got.Record != "task_added" || !strings.Contains(got.Reason, "task without containers") {
		t.Fatalf("record_refused = %+v", got)
	}

	r.crash()
	r.advance(time.Second)
	h := r.e.Unhealthy()
	for _, want := range []string{"core: ", "task/bad", "m-bad", "task_added", "never run"} {
		if !strings.Contains(h, want) {
			t.Fatalf("after a restart the core slot does not say %q: %q", want, h)
		}
	}
	if r.known("task/good") != event.StatusRunning {
		t.Fatalf("task/good is %s after the restart", r.known("task/good"))
	}
	r.verify()

	// The control plane sends the payload again: acknowledged, not applied twice.
	raw, _ := json.Marshal(protocol.Task{ARN: "task/bad", DesiredStatus: "RUNNING", Containers: []protocol.Container{ctr("app")}})
	done := make(chan error, 1)
	r.e.Step(context.Background(), engine.PayloadInput{Payload: protocol.Payload{MessageID: "m-bad", Tasks: []json.RawMessage{raw}}, Done: done})
	if err := <-done; err != nil {
		t.Fatalf("the payload sent again is not acknowledged: %v", err)
	}
	r.advance(time.Second)
	if r.known("task/bad") != "" {
		t.Fatalf("task/bad is %s after its payload was sent again: applied twice", r.known("task/bad"))
	}

	// A later payload with the task is decided afresh: the task runs, and is no longer "never run".
	r.assign("task/bad", "RUNNING", ctr("app"))
	r.advance(time.Second)
	if r.known("task/bad") != event.StatusRunning {
		t.Fatalf("task/bad is %s after a new payload carried it", r.known("task/bad"))
	}
	if h := r.e.Unhealthy(); !strings.Contains(h, "m-bad") || strings.Contains(h, "never run") {
		t.Fatalf("core slot after the task arrived again: %q", h)
	}
}

// refuseTaskAdded hands the engine, as the core's verdict on payload m, a task_added for arn
// that the projection refuses (no containers): a bug in the core.
func refuseTaskAdded(r *rig, m, arn string) engine.Ready {
	return r.e.JournalPayload(m, fsm.Verdict{Records: []event.Record{
		{Event: &event.PayloadReceived{MessageID: m}},
		{Task: arn, Event: &event.TaskAdded{MessageID: m, Desired: event.StatusRunning}},
	}})
}

// A refusal is named until the retention ends, no longer: then a compaction forgets it with its
// record, the core slot clears, and a restart does not bring it back.
func TestARefusalIsForgottenWhenItsRetentionEnds(t *testing.T) {
	r := newRig(t, 0)
	r.cfg.Retention, r.cfg.SnapshotEvery = time.Minute, 10
	r.crash() // take the new config
	refuseTaskAdded(r, "m-bad", "task/bad")
	r.crash()
	if h := r.e.Unhealthy(); !strings.Contains(h, "task/bad") {
		t.Fatalf("the core slot does not name the refusal after a restart: %q", h)
	}
	r.advance(2 * time.Minute)
	for i := 0; i < 3; i++ { // enough new records for a snapshot, which triggers compaction
		r.assign(fmt.Sprintf("task/new-%d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	if h := r.e.Unhealthy(); strings.Contains(h, "core") {
		t.Fatalf("the core slot outlived the refusal's retention: %q", h)
	}
	if n := len(r.records("task/bad", event.TypeRecordRefused)); n != 0 {
		t.Fatalf("%d record_refused outlived the retention", n)
	}
	r.crash()
	if h := r.e.Unhealthy(); strings.Contains(h, "core") {
		t.Fatalf("a restart brought a forgotten refusal back: %q", h)
	}
	r.verify()
}
