package engine

import (
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/submit"
)

// handle hands one input to the core and records its verdict.
func (e *Engine) handle(in Input) {
	now := e.clock.Now()
	switch in := in.(type) {
	case PayloadInput:
		e.handlePayload(now, in)
	case PollInput:
		if e.sub != nil { // the control plane answers: an outage's backoff is over
			polled := submit.Polled{Outage: in.Outage, Held: in.Held, Payloads: len(in.Payloads) > 0}
			if polled.Payloads {
				polled.ReceivedAt = in.Payloads[0].ReceivedAt
			}
			e.sub.step(now, polled)
		}
		for _, p := range in.Payloads {
			e.handlePayload(now, PayloadInput{Payload: p})
		}
		if in.Done != nil {
			w := waiting{done: in.Done}
			for _, p := range in.Payloads {
				w.ids = append(w.ids, p.MessageID)
			}
			e.burst.waiting = append(e.burst.waiting, w)
		}
	case ActionResult:
		e.handleAction(now, in)
	case ExitInput:
		_ = e.node.Step(now, exitInput(in.Exit))
	case HealthInput:
		h := in.Change
		_ = e.node.Step(now, fsm.HealthObserved{Task: h.Task, Container: h.Container, RuntimeID: h.ID, Health: h.Health})
	case ReportInput:
		e.handleReport(now, in)
	case CompactInput:
		e.handleCompact(now, in)
	case ImageSpaceInput:
		e.space = in
		_ = e.node.Step(now, imageSpaceInput(in))
	case ReconcileInput:
		e.handleReconcile(now, in)
	}
}

// handlePayload hands a payload to the node, which records it and puts its id in its Ready's
// Acks: answered once the commit holding them returns, the poller acknowledges it (a
// duplicate's, too: the journal holds it already).
func (e *Engine) handlePayload(now time.Time, in PayloadInput) {
	p := in.Payload
	_ = e.node.Step(now, fsm.PayloadArrived{MessageID: p.MessageID, Tasks: p.Tasks, Rules: e.cfg.TaskRules})
	if in.Done != nil {
		e.burst.waiting = append(e.burst.waiting, waiting{ids: []string{p.MessageID}, done: in.Done})
	}
}

// noted logs and counts what the node saw (fsm.Note).
func (e *Engine) noted(x fsm.Note) {
	switch x.Kind {
	case fsm.NoteSkipped:
		e.log.Warn().Str("message", x.Subject).Str("problem", x.Detail).Msg("skipped")
	case fsm.NotePayloadDuplicate:
		e.metrics.payloads.WithLabelValues("duplicate").Inc()
	case fsm.NotePayloadJournaled:
		e.metrics.payloads.WithLabelValues("journaled").Inc()
	case fsm.NoteFailedStopped:
		e.log.Warn().Str("action", x.Subject).Str("error", x.Detail).Msg("runtime call failed; the container is recorded STOPPED")
	case fsm.NoteStranger:
		e.log.Warn().Str("id", x.Detail).Str("container", x.Subject).Msg("container of this agent unknown to the journal; left alone")
	case fsm.NoteImageReleased:
		e.metrics.imagesReleased.Inc()
		e.log.Info().Str("image", x.Subject).Str("held_by", x.Detail).Msg("image released: someone else holds it too (held_by says how); no longer the agent's to remove")
	case fsm.NoteImageRemoved:
		e.metrics.imagesRemoved.Inc()
		e.log.Info().Str("image", x.Subject).Msg("image removed")
	case fsm.NoteImageNotRemoved:
		e.metrics.imageRemovalFailures.Inc()
		e.log.Warn().Str("image", x.Subject).Str("error", x.Detail).Msg("image not removed; the next cycle may try again")
	case fsm.NoteDiskUnread:
		e.log.Warn().Str("error", x.Detail).Msg("image collection: cannot read the runtime's free disk space; collecting by age only")
	case fsm.NoteDiskLow:
		e.log.Warn().Uint64("free_bytes", e.space.Free).Uint64("total_bytes", e.space.Total).Int("threshold_percent", e.cfg.Images.LowFreePercent).
			Msg("image collection: the runtime's disk is low; removing unused images regardless of age")
	}
}
