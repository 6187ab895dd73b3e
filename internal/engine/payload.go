package engine

import (
	"encoding/json"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// handlePayload journals a payload and what it does to each task, all in one atomic append,
// before the poller may acknowledge it. A message id the journal already holds is not applied
// again (the poller acknowledges it again). A task whose ARN is live or tombstoned is never
// started again: only a forward move of its desired status is taken.
func (e *Engine) handlePayload(p protocol.Payload) {
	log := e.log.With().Str("message", p.MessageID).Logger()
	if p.MessageID == "" {
		log.Warn().Int("tasks", len(p.Tasks)).Msg("payload without message_id skipped: it cannot be acknowledged")
		return
	}
	if _, seen := e.st.Messages[p.MessageID]; seen {
		e.metrics.payloads.WithLabelValues("duplicate").Inc()
		return
	}
	raws := make([]json.RawMessage, 0, len(p.Tasks))
	recs := []event.Record{{Event: &event.PayloadReceived{MessageID: p.MessageID}}}
	desired := map[string]event.Status{} // tasks of this payload and their desired status so far
	for i, raw := range p.Tasks {
		raws = append(raws, raw)
		d := protocol.DecodeTask(raw)
		if d.ARN == "" {
			log.Warn().Int("index", i).Str("problem", d.Invalid).Msg("task without arn skipped")
			continue
		}
		cur, known := desired[d.ARN]
		if !known {
			if t, live := e.st.Tasks[d.ARN]; live {
				cur, known = t.Desired, true
			} else if _, tomb := e.st.Tombstones[d.ARN]; tomb {
				cur, known = event.StatusStopped, true
			}
		}
		if known {
			recs = append(recs, event.Record{Task: d.ARN, Event: &event.TaskResent{MessageID: p.MessageID, Desired: d.Desired}})
			if d.Desired == event.StatusStopped && cur == event.StatusRunning {
				recs = append(recs, event.Record{Task: d.ARN, Event: &event.DesiredChanged{MessageID: p.MessageID, To: event.StatusStopped}})
				desired[d.ARN] = event.StatusStopped
			} else {
				desired[d.ARN] = cur
			}
			continue
		}
		switch {
		case i >= protocol.MaxTasksPerPayload:
			recs = append(recs, event.Record{Task: d.ARN, Event: &event.TaskRejected{MessageID: p.MessageID, Reason: "payload carries more than 100 tasks; this one is past the limit"}})
		case d.Invalid != "":
			log.Warn().Str("task", d.ARN).Str("problem", d.Invalid).Msg("invalid task recorded STOPPED")
			rej := &event.TaskRejected{MessageID: p.MessageID, Reason: d.Invalid}
			if d.Task != nil {
				for _, c := range d.Task.Containers {
					rej.Containers = append(rej.Containers, c.Name)
				}
			}
			recs = append(recs, event.Record{Task: d.ARN, Event: rej})
		default:
			recs = append(recs, event.Record{Task: d.ARN, Event: &event.TaskAdded{MessageID: p.MessageID,
				Family: d.Task.Family, Version: d.Task.Version, Desired: d.Desired, Containers: d.Task.Spec()}})
			log.Info().Str("task", d.ARN).Str("desired", string(d.Desired)).Msg("task assigned")
		}
		desired[d.ARN] = d.Desired
	}
	recs[0].Event.(*event.PayloadReceived).Tasks = compact(raws)
	e.record(recs...) // acknowledged by the poller only once the burst's commit returns
	e.metrics.payloads.WithLabelValues("journaled").Inc()
}

// compact re-encodes raw tasks without insignificant space, so the journal holds them
// deterministically; a task that is not JSON at all is kept as a JSON string.
func compact(raws []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(raws))
	for i, r := range raws {
		var v any
		if err := json.Unmarshal(r, &v); err != nil {
			s, _ := json.Marshal(string(r))
			out[i] = s
			continue
		}
		b, _ := json.Marshal(v)
		out[i] = b
	}
	return out
}
