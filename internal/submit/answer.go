package submit

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/protocol"
)

// An answer settles only what was sent, and only a settlement is progress: a 200 that settles
// none of the changes sent is a failure like any other. Every other answer sets the wait before
// the next report by its kind — a 429 its Retry-After and window (retry.go), refused
// credentials slowly, a report refused as a whole split (isolate.go), a failure at the
// transport the outage's wait (outage.go) — and joins the streak of failures (streak.go).

// answered takes the answer to the report begun with sent.
func (s *Submitter) answered(now time.Time, sent []protocol.StateChange, r protocol.ReportResult) Plan {
	s.send.inflight = false
	var o Plan
	if len(sent) == 0 {
		return o // nothing was sent: nothing to learn
	}
	s.burst.drained = false
	if r.Outcome == protocol.Settled {
		ids := map[string]bool{}
		for _, c := range sent {
			ids[c.ID] = true
		}
		settled := &event.ChangesSettled{}
		for _, id := range r.Accepted {
			if ids[id] {
				settled.Accepted = append(settled.Accepted, id)
			}
		}
		for _, rj := range r.Rejected {
			if ids[rj.ID] {
				settled.Rejected = append(settled.Rejected, event.Rejection{ID: rj.ID, Error: rj.Error})
			}
		}
		s.send.stats.Accepted += uint64(len(settled.Accepted))
		s.send.stats.Rejected += uint64(len(settled.Rejected))
		if len(settled.Accepted)+len(settled.Rejected) > 0 {
			s.settledHeld(settled.Accepted)
			for _, rj := range settled.Rejected {
				s.settledHeld([]string{rj.ID})
			}
			o.Settled = settled
			if s.streak.outcome != "" {
				o.Log = fmt.Sprintf("reports settle again after %d failed attempts (%s since %s)", s.streak.tries, s.streak.outcome, s.streak.since.Format(time.RFC3339))
			}
			var waited time.Duration // how long the throttle kept these changes out, after how many 429s
			var throttled int
			if s.streak.outcome == protocol.Throttled {
				waited, throttled = now.Sub(s.streak.since), s.streak.tries
			}
			s.streak.outcome, s.streak.health, s.streak.unjournaled, s.streak.tries, s.outage.placed = "", "", 0, 0, 0
			s.streak.bo.Reset()
			s.send.next = s.settledPaced(now, waited, throttled)
			s.burst.drained, s.burst.drainedAt = s.send.carried, now
			return o
		}
		// A 200 that settles none of what was sent: not progress, so back off like a failure.
		r.Outcome, r.Err = protocol.ServerError, fmt.Errorf("HTTP 200 settled none of the %d changes sent", len(sent))
	}
	s.send.stats.Failed++
	if r.Outcome != protocol.Throttled {
		s.burst.open = false // its first report's time says nothing of the throttle's order
	}
	if s.streak.outcome != "" && s.streak.outcome != r.Outcome {
		// A streak of another kind: what grew the backoff is over, so it starts afresh.
		s.streak.bo.Reset()
	}
	var wait time.Duration
	switch {
	case s.p.Naive:
		wait = time.Second
		if r.Outcome == protocol.Throttled {
			s.send.stats.Throttled++
		}
	case r.Outcome == protocol.Throttled:
		s.send.stats.Throttled++
		s.gather.met429 = max(s.burst.count, 1)
		wait = s.throttled(now, arrivedAt(now, r.ReceivedAt), r.RetryAfter, s.streak.outcome == protocol.Throttled)
		s.streak.health = ""
	case r.Outcome == protocol.Unauthorized:
		wait = max(s.streak.bo.NextBackOff(), s.p.SlowRetry)
		s.streak.health = fmt.Sprintf("control plane refuses the agent's credentials (HTTP %d) since %s", r.HTTPStatus, s.sinceOr(now, r.Outcome))
	case r.Outcome == protocol.BadRequest || r.Outcome == protocol.TooLarge:
		// Refused as a whole: split until the change at fault stands alone, then hold it.
		// Not a health problem: the other changes keep flowing.
		var msg string
		wait, msg = s.refused(now, sent, r)
		s.streak.health = ""
		if msg != "" {
			o.Log = msg
		}
	default:
		wait = s.streak.bo.NextBackOff()
		if r.Outcome == protocol.Network {
			wait = s.outageWait(now, wait)
		}
		s.streak.health = ""
	}
	s.failed(now, sent, r, &o)
	s.send.next = now.Add(wait)
	return o
}
