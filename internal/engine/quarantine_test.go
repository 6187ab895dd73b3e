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
// record_refused stands in for it, so after a restart the task is still named with its
// payload — not lost in silence, the control plane believing the agent has it. In the process
// that refused it the agent is unhealthy (the core slot); after the restart it is healthy and
// degraded (the core_refusals slot): nothing is stuck, and a liveness probe must not restart
// it in a loop until the retention ends. The payload sent again is acknowledged and not
// applied twice; a later payload with the task is decided afresh.
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

	if h := r.e.Unhealthy(); !strings.Contains(h, "core: ") || !strings.Contains(h, "task/bad") || !strings.Contains(h, "m-bad") {
		t.Fatalf("the process that refused the record is not unhealthy naming it: %q", h)
	}

	r.crash()
	r.advance(time.Second)
	if h := r.e.Unhealthy(); h != "" {
		t.Fatalf("after a restart a remembered refusal keeps the agent unhealthy: %q", h)
	}
	h := degraded(r, engine.HealthCoreRefusals)
	for _, want := range []string{"task/bad", "m-bad", "task_added", "never run"} {
		if !strings.Contains(h, want) {
			t.Fatalf("after a restart the core_refusals slot does not say %q: %q", want, h)
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
	if h := degraded(r, engine.HealthCoreRefusals); !strings.Contains(h, "m-bad") || strings.Contains(h, "never run") {
		t.Fatalf("core_refusals slot after the task arrived again: %q", h)
	}
	if h := r.e.Unhealthy(); h != "" {
		t.Fatalf("unhealthy after the task arrived again: %q", h)
	}
}

// TestARefusalIsWordedOnOneLine: a refusal's reason and record type come from the journal (a
// record a damaged or foreign journal may hold); the health text that words them is one line
// with nothing a terminal or log reader would act on.
func TestARefusalIsWordedOnOneLine(t *testing.T) {
	r := newRig(t, time.Hour)
	r.e.JournalPayload("m-odd", fsm.Verdict{Records: []event.Record{
		{Event: &event.PayloadReceived{MessageID: "m-odd"}},
		{Task: "task/odd", Event: &event.RecordRefused{MessageID: "m-odd", Record: "task_added\n", Reason: "first line\nsecond \x1b[31mred"}},
	}})
	r.crash()
	r.advance(time.Second)
	h := degraded(r, engine.HealthCoreRefusals)
	if !strings.Contains(h, "task/odd") || strings.ContainsAny(h, "\n\x1b") {
		t.Fatalf("the core_refusals slot words a refusal off one line: %q", h)
	}
}

// degraded is the problem of a degraded-only slot ("" while it works); it fails the test if
// the slot is not listed as degraded.
func degraded(r *rig, src engine.HealthSource) string {
	r.t.Helper()
	for _, s := range r.e.Health() {
		if s.Source == src {
			if !s.Degraded {
				r.t.Fatalf("slot %s is not degraded-only: %+v", src, s)
			}
			return s.Problem
		}
	}
	r.t.Fatalf("no slot %s among %+v", src, r.e.Health())
	return ""
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
	if h := degraded(r, engine.HealthCoreRefusals); !strings.Contains(h, "task/bad") {
		t.Fatalf("the core_refusals slot does not name the refusal after a restart: %q", h)
	}
	r.advance(2 * time.Minute)
	for i := 0; i < 3; i++ { // enough new records for a snapshot, which triggers compaction
		r.assign(fmt.Sprintf("task/new-%d", i), "RUNNING", ctr("app", "exit", "0"))
		r.advance(time.Second)
	}
	if h := degraded(r, engine.HealthCoreRefusals); h != "" {
		t.Fatalf("the core_refusals slot outlived the refusal's retention: %q", h)
	}
	if n := len(r.records("task/bad", event.TypeRecordRefused)); n != 0 {
		t.Fatalf("%d record_refused outlived the retention", n)
	}
	r.crash()
	if h := degraded(r, engine.HealthCoreRefusals); h != "" {
		t.Fatalf("a restart brought a forgotten refusal back: %q", h)
	}
	if h := r.e.Unhealthy(); h != "" {
		t.Fatalf("unhealthy with no refusal left: %q", h)
	}
	r.verify()
}

// TestARefusedStopIsDecidedAgainAfterARestart: should the core's desired_changed of a
// payload that stops a running task be refused, the payload is acknowledged and held (a
// re-send does not apply it), and a restart decides afresh from a journal that never held the
// stop: the task would run on although the control plane asked it to stop. Its record_refused
// carries the STOPPED asked for, and the restart offers it to the core again: the stop is
// decided, the task stops — once: the next restart offers nothing.
func TestARefusedStopIsDecidedAgainAfterARestart(t *testing.T) {
	r := newRig(t, time.Hour)
	r.assign("task/a", "RUNNING", ctr("app"))
	r.advance(time.Second)
	if r.known("task/a") != event.StatusRunning {
		t.Fatalf("task/a is %s", r.known("task/a"))
	}
	ready := refuseStop(r, "m-stop", "task/a")
	if !slices.Contains(ready.Acks, "m-stop") {
		t.Fatalf("the payload is not acknowledged:\n%s", ready)
	}
	if got := refusedDesired(r, "task/a"); len(got) != 1 || got[0] != "m-stop:STOPPED" {
		t.Fatalf("record_refused asking a desired status: %v, want [m-stop:STOPPED]", got)
	}
	r.advance(time.Second)
	if r.known("task/a") != event.StatusRunning || !strings.Contains(r.e.Unhealthy(), "core: ") {
		t.Fatalf("in the process that refused the stop: task/a %s, health %q; want RUNNING, quarantined", r.known("task/a"), r.e.Unhealthy())
	}

	r.crash()
	r.advance(time.Second)
	if r.known("task/a").Rank() < event.StatusStopped.Rank() {
		t.Fatalf("after a restart task/a is %s: the stop the control plane asked for is lost", r.known("task/a"))
	}
	if got := desiredChanges(r, "task/a"); !slices.Equal(got, []string{"m-stop:STOPPED"}) {
		t.Fatalf("desired_changed for task/a: %v, want the refused one offered again", got)
	}
	if h := r.e.Unhealthy(); h != "" {
		t.Fatalf("after the stop was decided again the agent is unhealthy: %q", h)
	}

	r.crash() // offered once and taken: the next start offers nothing
	r.advance(time.Second)
	if got := desiredChanges(r, "task/a"); len(got) != 1 {
		t.Fatalf("desired_changed for task/a after a second restart: %v", got)
	}
	r.verify()
}

// TestANewerMessageWinsOverARefusedStop: a refused stop is offered again after a restart only
// if no later desired status change was journaled: a later stop that was, is the stop (not
// two). A later message sending the task RUNNING again retracts nothing — desired status only
// moves forward (PROTOCOL.md §1) — so the refused stop is still decided after the restart.
func TestANewerMessageWinsOverARefusedStop(t *testing.T) {
	for _, later := range []string{"STOPPED", "RUNNING"} {
		t.Run("later "+later, func(t *testing.T) {
			r := newRig(t, time.Hour)
			r.assign("task/a", "RUNNING", ctr("app"))
			r.advance(time.Second)
			refuseStop(r, "m-stop", "task/a")
			m := r.assign("task/a", later, ctr("app"))
			r.crash()
			r.advance(time.Second)
			want := []string{"m-stop:STOPPED"} // a re-send RUNNING retracts no stop: the refused one is decided
			if later == "STOPPED" {
				want = []string{m + ":STOPPED"} // the newer stop was journaled: m-stop is not offered too
			}
			if got := desiredChanges(r, "task/a"); !slices.Equal(got, want) {
				t.Fatalf("desired_changed for task/a: %v, want %v", got, want)
			}
			if r.known("task/a").Rank() < event.StatusStopped.Rank() {
				t.Fatalf("task/a is %s after the restart; it was asked to stop (later message: %s)", r.known("task/a"), later)
			}
			r.verify()
		})
	}
}

// refuseStop hands the engine, as the core's verdict on payload m, a stop of the live task arn
// that the projection refuses: decided together with a task_added for the live ARN (a bug).
func refuseStop(r *rig, m, arn string) engine.Ready {
	return r.e.JournalPayload(m, fsm.Verdict{Records: []event.Record{
		{Event: &event.PayloadReceived{MessageID: m}},
		{Task: arn, Event: &event.TaskAdded{MessageID: m, Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: "app", Image: "web:3"}}}},
		{Task: arn, Event: &event.DesiredChanged{MessageID: m, To: event.StatusStopped}},
	}})
}

// refusedDesired is the task's record_refused that ask a desired status, as message:status.
func refusedDesired(r *rig, arn string) []string {
	var out []string
	for _, rec := range r.records(arn, event.TypeRecordRefused) {
		if e := rec.Event.(*event.RecordRefused); e.Desired != "" {
			out = append(out, e.MessageID+":"+string(e.Desired))
		}
	}
	return out
}

// desiredChanges is the task's journaled desired_changed, as message:status.
func desiredChanges(r *rig, arn string) []string {
	var out []string
	for _, rec := range r.records(arn, event.TypeDesiredChanged) {
		e := rec.Event.(*event.DesiredChanged)
		out = append(out, e.MessageID+":"+string(e.To))
	}
	return out
}
