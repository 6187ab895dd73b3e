package submit

import "time"

// A burst is the changes that follow a quiet spell: its first report goes at the agent's slot
// (slot.go), counted from when the burst began for the whole fleet — the arrival of the
// payloads the control plane sent it, however late a busy host read them or had its first
// change ready — so the fleet keeps its order however long each agent took. Changes that
// trickle in behind a report just settled continue the burst.

// burst is the current burst of changes.
type burst struct {
	open       bool      // its first report is not settled yet: it teaches the slot
	start      time.Time // when it began
	count      int       // bursts begun (gather.go)
	drained    bool      // the last report carried every pending change and settled
	drainedAt  time.Time // when it settled
	assignedAt time.Time // when a poll last brought payloads (their arrival)
}

const (
	// quietGap is how long the agent must have had nothing to report for new changes to
	// begin a burst. Changes that trickle in behind a report just settled (tasks starting one
	// after another) continue the burst: they neither wait for the slot again nor teach it,
	// since where the throttle serves them depends on the fleet's follow-ups, not on its order.
	quietGap = 2 * time.Second
	// maxAssignLag bounds how long after payloads arrived the changes that follow still count
	// from their arrival.
	maxAssignLag = 30 * time.Second
)

// spreadQuiet starts a burst: the first report after the agent had nothing left to report
// (its last report carried every pending change and settled) goes at the agent's slot, and
// ready says whether it may go now. Changes kept waiting by a failure or a backlog go when due.
// began says a burst began here, and onHost that it began on this host (its containers), not
// from a poll's payloads: the poller polls afresh for such a burst (Plan.Repoll).
func (s *Submitter) spreadQuiet(now time.Time) (ready, began, onHost bool) {
	if !s.burst.drained {
		return true, false, false
	}
	s.burst.drained = false
	if now.Sub(s.burst.drainedAt) < quietGap {
		return true, false, false
	}
	start, onHost := now, true
	if s.burst.assignedAt.After(s.burst.drainedAt) && now.Sub(s.burst.assignedAt) < maxAssignLag {
		// The burst follows payloads the control plane sent the whole fleet at one moment:
		// the slot counts from then, not from when this agent, busy or slow, had its first
		// change ready, so the fleet keeps its order however long each agent took.
		start, onHost = s.burst.assignedAt, false
	}
	s.burst.open, s.burst.start, s.outage.burstPlaced = true, start, false
	s.burst.count++
	if s.gather.met429 == 0 && !s.underThrottle() {
		// A new agent's first place (slot.go) that no 429 proved in its first bursts: its
		// control plane does not throttle it, and its reports go at once.
		s.slot.at, s.slot.served = 0, 0
	}
	s.slot.depth = max(s.slot.at, time.Duration(slotShrink*float64(s.slot.depth)))
	if s.slot.at == 0 || s.p.Naive {
		return true, true, onHost
	}
	s.send.next = start.Add(s.slot.at + s.spread(s.slot.at/20))
	return !now.Before(s.send.next), true, onHost
}

// maxArrivalLag bounds how long before it was handled an answer may count as having arrived:
// a busy host reads its answers seconds late (the reason to count from their arrival at all),
// never minutes; a time further back is not an arrival (a clock stepped, a test's virtual
// clock) and the answer counts from now.
const maxArrivalLag = 10 * time.Second

// arrivedAt is when an answer handled now reached the host, given the transport's measure of
// it (zero: none): that, unless it is implausible (after now, or over maxArrivalLag before).
func arrivedAt(now, received time.Time) time.Time {
	if received.IsZero() || received.After(now) || now.Sub(received) > maxArrivalLag {
		return now
	}
	return received
}
