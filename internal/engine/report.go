package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/failpoint"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// report is the next state-change request, when the submitter allows and something is
// unsent (nil: none now). It runs once a burst's commit has returned, so it chooses from the
// durable outbox, and the submitter records the report begun only when it is really sent.
// The node's calls out include those the burst decided, about to go.
func (e *Engine) report(now time.Time) []protocol.StateChange {
	if e.cp == nil || e.sub == nil || e.st.OutboxLen() == 0 {
		return nil
	}
	ready := e.sub.Ready(now)
	if e.sub.Repoll() {
		// A burst this host began waits for its slot: a long poll begun before it would not
		// tell of a hang the control plane is in (submit.Repoll); one begun now is held in it.
		e.inbox.poll.cut()
	}
	if !ready {
		return nil
	}
	// Calls whose outcomes are changes still to come: a burst's first report may wait for
	// them. The burst's own count: a task's start, decided as its create ended, is not yet
	// out, and with only what is out the gathering ended between one call and the next (bench
	// fleet's start round: 20 agents' first reports carried half their changes).
	e.sub.Coming(e.node.Out(fsm.ActStop) || e.node.Out(fsm.ActStart) || e.node.Out(fsm.ActCreate) || e.node.Out(fsm.ActPull))
	// The submitter chooses from the oldest pending changes: fewer after a refused report, and
	// never a change it holds (refused alone) nor one queued behind it in its task.
	// Every candidate held: nil, and NextAttempt says when one is due.
	return e.sub.BeginAt(now, e.st.Pending(e.sub.Want()))
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
	o := e.sub.Done(now, in.Sent, in.Result)
	if in.Result.HTTPStatus != 0 {
		select {
		case e.inbox.answered <- struct{}{}: // the control plane answers: the poller need not wait
		default:
		}
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
	_ = e.node.Step(now, fsm.ReportAnswered{Sent: in.Sent, Settled: o.Settled, Attempt: o.Attempt})
	// The next batch goes out with this burst (endBurst), before the decisions this answer
	// unlocks are acted on: under throttling the request slot is the scarce thing, not the disk.
	switch problem, credentials := e.sub.Health(); {
	case problem == "":
		e.clearHealth(HealthControlPlane)
		e.clearHealth(HealthCredentials)
	case credentials:
		e.setHealth(HealthCredentials, problem)
		e.clearHealth(HealthControlPlane)
	default:
		e.setHealth(HealthControlPlane, problem)
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
		if s := e.sub; s != nil {
			streak, since := s.Streak()
			r = Reporting{InFlight: s.InFlight(), Streak: string(streak), StreakSince: since,
				Requests: s.Stats.Requests, Throttled: s.Stats.Throttled, Failed: s.Stats.Failed,
				Accepted: s.Stats.Accepted, Rejected: s.Stats.Rejected, PaceSeconds: s.Pace().Seconds()}
			if next := s.NextAttempt(); next.After(e.clock.Now()) {
				r.NextAttempt = next
			}
		}
		f(st, r)
	})
}
