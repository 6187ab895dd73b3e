package submit

import (
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// Never more than one report in flight, so per-task order holds by construction, and none
// before the wait the last answer set: a throttled wait is a time in the plan, holding no slot.

// sending is the report in flight and when the next may go.
type sending struct {
	inflight bool
	next     time.Time // not before this
	wake     time.Time // when nothing could be chosen: when a held change is due (isolate.go)
	last     time.Time // when the last report was begun
	carried  bool      // the report in flight carries every change pending when it began
	stats    Stats
}

// offered takes a Report: whether one may go now (its burst's slot, gathering), and which
// changes it carries. Every candidate held: nothing, and the plan's At says when one is due.
func (s *Submitter) offered(now time.Time, r Report) Plan {
	var p Plan
	if s.send.inflight || now.Before(s.send.next) {
		return p
	}
	ready, began, onHost := s.spreadQuiet(now)
	if began && onHost && !ready {
		// Once a burst: it began now on this host and waits for its slot (outage.go repoll).
		s.outage.repolledAt = now
		p.Repoll = true
	}
	if !ready {
		return p
	}
	candidates := r.Outbox.Pending(s.want())
	if s.gathers(now, len(candidates), r.Coming) {
		return p
	}
	if at := s.behindLate(now); !at.IsZero() {
		s.send.next = at
		return p
	}
	out, wake := s.choose(now, candidates, len(candidates) < s.want())
	s.send.wake = wake
	if len(out) == 0 {
		return p
	}
	s.send.inflight, s.outage.retryPlaced = true, notPlaced
	s.send.last = now
	s.send.carried = len(out) == len(candidates)
	s.send.stats.Requests++
	p.Send = out
	return p
}

// nextAttempt is when a waiting submitter may send again (zero when it need not wait); after
// an offer that chose nothing, when a held change is next due.
func (s *Submitter) nextAttempt() time.Time {
	if s.send.wake.After(s.send.next) {
		return s.send.wake
	}
	return s.send.next
}

// wire is a change's form on the wire, its reason within protocol.MaxReasonBytes.
func wire(c fsm.Change) protocol.StateChange {
	return protocol.StateChange{ID: c.ID, TaskARN: c.Task, Container: c.Container, Status: string(c.Status),
		ExitCode: c.ExitCode, Reason: protocol.ShortenReason(c.Reason), At: c.At, NetworkBindings: c.NetworkBindings, Health: string(c.Health)}
}
