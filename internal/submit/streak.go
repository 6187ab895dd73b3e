package submit

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// A streak of failures of one kind is one story: one log line when it begins (and one when
// reports settle again), at most one report_attempted record per JournalEach carrying how many
// attempts it folds, and one backoff (internal/jitter: seeded jitter, never giving up) that
// starts afresh when the streak changes kind and ends with it. Its kind is the reporter's
// health: refused credentials, a control plane failing, or — while reports settle — a change
// held because the control plane refuses it alone (isolate.go).

// streak is the current failure streak ("" outcome after a success).
type streak struct {
	bo            *jitter.Backoff
	outcome       protocol.Outcome
	since         time.Time
	tries         int
	unjournaled   int       // attempts not yet in a report_attempted record
	lastJournaled time.Time // when the last was
	health        string
}

// failed counts a failed attempt in the streak: a log line if it began one, a
// report_attempted record if one is due.
func (s *Submitter) failed(now time.Time, sent []protocol.StateChange, r protocol.ReportResult, o *Plan) {
	if s.streak.outcome != r.Outcome {
		if o.Log == "" {
			o.Log = fmt.Sprintf("reporting state changes: %s: %v", r.Outcome, r.Err)
		}
		s.streak.outcome, s.streak.since = r.Outcome, now
		s.streak.lastJournaled = time.Time{}
	}
	s.streak.unjournaled++
	s.streak.tries++
	if s.streak.lastJournaled.IsZero() || now.Sub(s.streak.lastJournaled) >= s.p.JournalEach {
		ids := make([]string, len(sent))
		for i, c := range sent {
			ids[i] = c.ID
		}
		o.Attempt = &event.ReportAttempted{IDs: ids, Outcome: string(r.Outcome), HTTPStatus: r.HTTPStatus, RetryAfter: r.RetryAfter, Error: errText(r.Err), Count: s.streak.unjournaled}
		s.streak.unjournaled, s.streak.lastJournaled = 0, now
	}
}

func (s *Submitter) sinceOr(now time.Time, out protocol.Outcome) string {
	if s.streak.outcome == out {
		return s.streak.since.Format(time.RFC3339)
	}
	return now.Format(time.RFC3339)
}

// health is "" when reporting works, else what is wrong (for /healthz and metrics), and
// whether the problem is the agent's credentials rather than the reports themselves. A change
// the control plane refuses alone is such a problem while it is held: its task cannot settle,
// so it is never cleaned up, though the other tasks' changes flow.
func (s *Submitter) health() (problem string, credentials bool) {
	if s.streak.health == "" && len(s.isolate.held) > 0 {
		return s.heldHealth(), false
	}
	return s.streak.health, s.streak.outcome == protocol.Unauthorized
}
