package engine

import (
	"time"

	"github.com/agentd/agentd/internal/event"
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
		e.handleExit(now, in)
	case HealthInput:
		h := in.Change
		e.record(e.st.Step(now, fsm.HealthObserved{Task: h.Task, Container: h.Container, RuntimeID: h.ID, Health: h.Health}).Records...)
	case ReportInput:
		e.handleReport(now, in)
	case CompactInput:
		e.handleCompact(now, in)
	case ImageSpaceInput:
		e.handleImageSpace(now, in)
	case ReconcileInput:
		e.handleReconcile(now, in)
	}
}

// handlePayload journals a payload's records and puts its id in the burst's Acks: answered
// once the commit holding them returns, the poller acknowledges it (a duplicate's, too: the
// journal holds it already).
func (e *Engine) handlePayload(now time.Time, in PayloadInput) {
	p := in.Payload
	e.journalPayload(in, e.st.Step(now, fsm.PayloadArrived{MessageID: p.MessageID, Tasks: p.Tasks, Rules: e.cfg.TaskRules}))
}

// journalPayload records the core's verdict on a payload and acknowledges it once the burst
// commits — also when the projection refused a record of it (quarantine.go).
func (e *Engine) journalPayload(in PayloadInput, v fsm.Verdict) {
	p := in.Payload
	for _, s := range v.Skipped {
		e.log.Warn().Str("message", event.MessageKey(p.MessageID)).Str("problem", s).Msg("skipped")
	}
	if v.Duplicate {
		e.metrics.payloads.WithLabelValues("duplicate").Inc()
	} else if len(v.Records) > 0 {
		e.metrics.payloads.WithLabelValues("journaled").Inc()
	}
	e.record(v.Records...)
	if p.MessageID != "" {
		e.burst.ready.Acks = append(e.burst.ready.Acks, p.MessageID)
	}
	if in.Done != nil {
		e.burst.waiting = append(e.burst.waiting, waiting{ids: []string{p.MessageID}, done: in.Done})
	}
}
