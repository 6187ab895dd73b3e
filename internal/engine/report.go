package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
	"github.com/agentd/agentd/internal/submit"
)

// reporter is the submitter (internal/submit) and the plan of its last step: what the engine
// reads of it between steps (when to offer a report, the operator's view) is that plan.
type reporter struct {
	node *submit.Submitter
	last submit.Plan
}

func (r *reporter) step(now time.Time, ev submit.Event) submit.Plan {
	r.last = r.node.Step(now, ev)
	return r.last
}

// report is the next state-change request, when the submitter allows and something is
// unsent (nil: none now). It runs once a burst's commit has returned, so it chooses from the
// durable outbox, and the submitter records the report begun only when it is really sent.
// calls is what is out with the calls the burst decided, about to go (its layer, fsm.Over):
// their outcomes are changes still to come, which a burst's first report may wait for — the
// burst's own count, as a task's start, decided as its create ended, is not yet out.
func (e *Engine) report(now time.Time, calls fsm.InFlight) []protocol.StateChange {
	if e.cp == nil || e.sub == nil || e.st.OutboxLen() == 0 {
		return nil
	}
	coming := calls.Out(fsm.ActStop) || calls.Out(fsm.ActStart) || calls.Out(fsm.ActCreate) || calls.Out(fsm.ActPull)
	p := e.sub.step(now, submit.Report{Outbox: e.st, Coming: coming})
	if p.Repoll {
		e.inbox.poll.cut() // a poll begun now is held in a hang the control plane is in
	}
	return p.Send
}

// sendReport is the executor's work for one report.
func (e *Engine) sendReport(sent []protocol.StateChange) func() Input {
	cp := e.cp
	return func() Input {
		res := cp.Report(context.Background(), sent)
		if res.Outcome == protocol.Settled {
			failpoint.Hit("report-after-send-before-journal") // settled there, not yet here
		}
		return ReportInput{Sent: sent, Result: res}
	}
}

// handleReport records what the control plane settled; only a settled task STOPPED opens the
// door to cleanup (the core then decides stopped_acked).
func (e *Engine) handleReport(now time.Time, in ReportInput) {
	o := e.sub.step(now, submit.Answer{Sent: in.Sent, Result: in.Result})
	if in.Result.HTTPStatus != 0 {
		select {
		case e.inbox.answered <- struct{}{}: // the control plane answers: the poller need not wait
		default:
		}
	}
	for _, c := range in.Sent {
		e.sched.mark(c.TaskARN) // a settled STOPPED makes stopped_acked due
	}
	e.metrics.reports.WithLabelValues(string(in.Result.Outcome)).Inc()
	if o.Log != "" {
		if in.Result.Outcome == protocol.Settled {
			e.log.Info().Msg(o.Log)
		} else {
			e.log.Warn().Str("outcome", string(in.Result.Outcome)).Msg(o.Log)
		}
	}
	// Lost with a failed commit: the changes are sent again, same ids.
	e.record(e.st.Step(now, fsm.ReportAnswered{Sent: in.Sent, Settled: o.Settled, Attempt: o.Attempt}).Records...)
	// The next batch goes out with this burst (endBurst), before the decisions this answer
	// unlocks are acted on: under throttling the request slot is the scarce thing, not the disk.
	switch {
	case o.Health == "":
		e.clearHealth(HealthControlPlane)
		e.clearHealth(HealthCredentials)
	case o.Credentials:
		e.setHealth(HealthCredentials, o.Health)
		e.clearHealth(HealthControlPlane)
	default:
		e.setHealth(HealthControlPlane, o.Health)
		e.clearHealth(HealthCredentials)
	}
}

// Reporting is the submitter as an operator sees it: whether a report awaits its answer, the
// failure streak it is in (throttled, server_error, …; "" while reports settle) and since
// when, when it may send next, and what it has seen since the agent started.
type Reporting struct {
	InFlight    bool      `json:"in_flight"`
	Streak      string    `json:"streak,omitempty"`
	StreakSince time.Time `json:"streak_since,omitzero"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
	Requests    uint64    `json:"requests"`
	Throttled   uint64    `json:"throttled"`
	Failed      uint64    `json:"failed"`
	Accepted    uint64    `json:"accepted"`
	Rejected    uint64    `json:"rejected"`
	// PaceSeconds is the agent's learnt slot in the fleet: how long after a burst of payloads
	// begins its first report goes, learnt from where the control plane's throttle served it
	// (0: no throttling seen).
	PaceSeconds float64 `json:"pace_seconds,omitempty"`
}

// QueryWithReporting is Query with the submitter's state beside the projection, both read on
// the loop's goroutine (the submitter is the loop's own), so the two agree with each other.
func (e *Engine) QueryWithReporting(ctx context.Context, f func(*fsm.State, Reporting)) error {
	return e.Query(ctx, func(st *fsm.State) {
		var r Reporting
		if e.sub != nil {
			s, n := e.sub.last.Status, e.sub.last.Status.Stats
			r = Reporting{InFlight: s.InFlight, Streak: string(s.Streak), StreakSince: s.StreakSince,
				Requests: n.Requests, Throttled: n.Throttled, Failed: n.Failed,
				Accepted: n.Accepted, Rejected: n.Rejected, PaceSeconds: s.Pace.Seconds()}
			if next := e.sub.last.At; next.After(e.clock.Now()) {
				r.NextAttempt = next
			}
		}
		f(st, r)
	})
}
