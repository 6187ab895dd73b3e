package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// payload maps a payload to its records: payload_received with the tasks as received, then
// per task one of task_added, task_rejected (it breaks a rule: recorded STOPPED with the
// reason), task_resent (the ARN is live or tombstoned: never started again) and
// desired_changed (a re-sent task's desired status moved forward). The engine journals them
// in one commit before the payload is acknowledged, so a payload is applied whole or not at
// all, and exactly once: a message id the journal holds is a Duplicate. The records carry the
// id's event.MessageKey, which bounds what a long id costs while it is remembered.
func (s *State) payload(p PayloadArrived) Verdict {
	var v Verdict
	if p.MessageID == "" {
		v.Skipped = append(v.Skipped, fmt.Sprintf("payload without message_id (%d tasks): it cannot be acknowledged", len(p.Tasks)))
		return v
	}
	id := event.MessageKey(p.MessageID)
	_, seen := s.Messages[id]
	if !seen && id != p.MessageID {
		_, seen = s.Messages[p.MessageID] // held as sent, by a journal older than MessageKey
	}
	for _, raw := range p.Tasks {
		if seen {
			break
		}
		seen = s.heldMessage(p.Rules.DecodeTask(raw).ARN, id, p.MessageID)
	}
	if seen {
		// Applied before: acknowledged again, nothing applied twice. But a task of it whose
		// STOPPED the control plane settled, sent again, means it lost track: say so, and
		// the STOPPED is reported again under its ids.
		v.Duplicate = true
		for _, raw := range p.Tasks {
			if arn := p.Rules.DecodeTask(raw).ARN; s.settledStopped(arn) {
				v.Records = append(v.Records, event.Record{Task: arn, Event: &event.TaskResent{MessageID: id}})
			}
		}
		return v
	}
	received := &event.PayloadReceived{MessageID: id, Tasks: compactRaw(p.Tasks)}
	v.Records = append(v.Records, event.Record{Event: received})
	desired := map[string]event.Status{} // tasks of this payload and their desired status so far
	for i, raw := range p.Tasks {
		d := p.Rules.DecodeTask(raw)
		if d.ARN == "" {
			v.Skipped = append(v.Skipped, fmt.Sprintf("task %d without arn: %s", i, d.Invalid))
			continue
		}
		rec := func(e event.Event) { v.Records = append(v.Records, event.Record{Task: d.ARN, Event: e}) }
		cur, known := desired[d.ARN]
		if !known {
			cur, known = s.knownDesired(d.ARN)
		}
		if known {
			rec(&event.TaskResent{MessageID: id, Desired: d.Desired})
			if desiredMoves(cur, d.Desired) {
				rec(&event.DesiredChanged{MessageID: id, To: event.StatusStopped})
				cur = event.StatusStopped
			}
			desired[d.ARN] = cur
			continue
		}
		switch {
		case i >= protocol.MaxTasksPerPayload:
			rec(&event.TaskRejected{MessageID: id, Reason: fmt.Sprintf("payload carries more than %d tasks; this one is past the limit", protocol.MaxTasksPerPayload)})
		case d.Invalid != "":
			rej := &event.TaskRejected{MessageID: id, Reason: d.Invalid}
			if d.Task != nil {
				for _, c := range d.Task.Containers {
					rej.Containers = append(rej.Containers, c.Name)
				}
			}
			rec(rej)
		default:
			rec(&event.TaskAdded{MessageID: id, Family: d.Task.Family, Version: d.Task.Version, Desired: d.Desired, Containers: d.Task.Spec()})
		}
		desired[d.ARN] = d.Desired
	}
	return v
}

// desiredMoves is the core's rule for a desired status stated for a task the agent knows
// (a payload's, or a refused change offered again after a restart): only RUNNING → STOPPED
// changes it; a desired status never moves back.
func desiredMoves(cur, to event.Status) bool {
	return cur == event.StatusRunning && to == event.StatusStopped
}

// settledStopped reports whether the control plane settled the task's STOPPED: tombstoned,
// or live past it.
func (s *State) settledStopped(arn string) bool {
	if t, live := s.Tasks[arn]; live {
		return t.Known == event.StatusStoppedAcked || t.Known == event.StatusCleaning
	}
	_, tomb := s.Tombstones[arn]
	return tomb
}

// knownDesired is the desired status of an ARN the agent knows, live or tombstoned.
func (s *State) knownDesired(arn string) (event.Status, bool) {
	if t, live := s.Tasks[arn]; live {
		return t.Desired, true
	}
	if _, tomb := s.Tombstones[arn]; tomb {
		return event.StatusStopped, true
	}
	return "", false
}

// compactRaw removes insignificant space from raw tasks, so the journal holds them
// deterministically and exactly as received otherwise (json.Compact keeps numbers and text as
// they were); a task that is not JSON at all is kept as a JSON string.
func compactRaw(raws []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(raws))
	for i, r := range raws {
		var b bytes.Buffer
		if err := json.Compact(&b, r); err != nil {
			s, _ := json.Marshal(string(r))
			out[i] = s
			continue
		}
		out[i] = b.Bytes()
	}
	return out
}
