package submit

import (
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// The submitter's one entry: the engine hands it what it saw (an Event) and does what the Plan
// says. Every decision is made inside Step, so what the engine reads of the submitter (when to
// offer a report again, its health, its streak) is the last Plan, never a second question.

// Event is what the engine saw: Report, Answer, Polled, Restart or Stop.
type Event interface{ isEvent() }

// Report offers a report: the engine may send now, and has unsent changes. Coming says the
// runtime is still making calls whose outcomes are changes (a stop, a start, a create, a pull):
// a burst's first report may wait for them (gather.go).
type Report struct {
	Outbox Outbox
	Coming bool
}

// Outbox is the projection's unsent changes, oldest first (fsm.State): the submitter reads as
// many as a report may need, a report's worth beyond the changes it holds.
type Outbox interface{ Pending(max int) []fsm.Change }

// Answer is the control plane's answer to the report Sent.
type Answer struct {
	Sent   []protocol.StateChange
	Result protocol.ReportResult
}

// Polled is a poll answered. Outage: the polls before it found the control plane unreachable.
// Held: the last of them was held and cut (a hang ended now). Payloads: it brought payloads,
// which reached the host at ReceivedAt (the transport's measure; zero: none).
type Polled struct {
	Outage, Held, Payloads bool
	ReceivedAt             time.Time
}

// Restart is the place the journal kept at the last clean stop (place.go).
type Restart struct{ Place Place }

// Stop is a clean stop: the plan's Keep is the place to keep for the next start.
type Stop struct{}

func (Report) isEvent()  {}
func (Answer) isEvent()  {}
func (Polled) isEvent()  {}
func (Restart) isEvent() {}
func (Stop) isEvent()    {}

// Plan is what the engine does after a step.
type Plan struct {
	// Send is the report to send now (Report; nil: none). It is in flight until its Answer.
	Send []protocol.StateChange
	// At is when to offer a Report again (zero: a report is in flight, or no wait).
	At time.Time
	// Repoll: cut the long poll in flight and poll afresh (outage.go, a burst begun on this host).
	Repoll bool
	// Settled and Attempt are to be journaled, Log logged once (Answer).
	Settled *event.ChangesSettled
	Attempt *event.ReportAttempted
	Log     string
	// Health is "" when reporting works, else what is wrong; Credentials says the problem is
	// the agent's credentials rather than the reports themselves (streak.go).
	Health      string
	Credentials bool
	// Keep is the place to keep across a restart (Stop); Refused, why a kept one was not taken
	// (Restart).
	Keep    Place
	Refused error
	Status  Status
}

// Status is the submitter as an operator sees it: a report in flight, the failure streak
// ("" while reports settle) and since when, the learnt slot, and the counts.
type Status struct {
	InFlight    bool
	Streak      protocol.Outcome
	StreakSince time.Time
	Pace        time.Duration
	Stats       Stats
}

// Step takes one event and says what to do.
func (s *Submitter) Step(now time.Time, ev Event) Plan {
	var p Plan
	switch ev := ev.(type) {
	case Report:
		p = s.offered(now, ev)
	case Answer:
		p = s.answered(now, ev.Sent, ev.Result)
	case Polled:
		s.pollAnswered(now, ev.Outage, ev.Held)
		if ev.Payloads {
			// What follows is the fleet's burst, begun for every agent when the control plane
			// sent it: counted from its arrival, not from when the engine got to it.
			s.burst.assignedAt = arrivedAt(now, ev.ReceivedAt)
		}
	case Restart:
		p.Refused = s.restore(ev.Place, now)
	case Stop:
		p.Keep = s.place(now)
	}
	if !s.send.inflight {
		p.At = s.nextAttempt()
	}
	p.Health, p.Credentials = s.health()
	p.Status = Status{InFlight: s.send.inflight, Streak: s.streak.outcome, StreakSince: s.streak.since, Pace: s.slot.at, Stats: s.send.stats}
	return p
}
