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
	judged     bool      // its first report, ready, was judged on time or late for the slot (behindLate)
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
	s.burst.open, s.burst.start, s.outage.burstPlaced, s.burst.judged = true, start, false, false
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

// lateAfter is how far past its slot (and the slot's spread) a burst's first report may be
// ready and still go at once: a wake or a host a little late (a token or two at a fleet's
// rates), not a host that took longer than its place.
const lateAfter = 50 * time.Millisecond

// behindLate is when a burst's first report, ready now after its gathering, goes if its host
// made it later than its slot: behind the fleet's burst as this agent last saw it (its depth),
// where the throttle has tokens nobody holds; zero when it goes now (on time, or the burst
// ends before now as it knows it). A storm's stops come out of the hosts hundreds of ms after
// the stop, and every agent placed before then is ready at once, more than the bucket holds
// (the tokens of those hundreds of ms were lost to its cap): each one refused under a throttle
// naming turns is given the token of an agent placed after it, and that one the next's, every
// agent to the storm's end answered 429 once (bench fleet at 200 agents after a start that
// placed many agents early: 35–47% of the storm's requests 429 in 1 run of 7; the fleet model,
// stops made over 600 ms, 19–37%, 0% so). Behind the burst the bucket's tokens the front left
// unspent serve them, and served at once there the agent keeps its place (slot.go: a report
// served at once shrinks its slot by the probe only).
// Judged once a burst, at its first report's first offer after gathering, against when it was
// due: its slot, or where a return placed it (outage.go).
func (s *Submitter) behindLate(now time.Time) time.Time {
	if s.burst.judged || s.slot.at == 0 || s.p.Naive {
		return time.Time{}
	}
	s.burst.judged = true
	behind := s.burst.start.Add(s.slot.depth)
	if now.Sub(s.send.next) <= lateAfter || !behind.After(now) {
		return time.Time{}
	}
	return behind.Add(s.spread(s.slot.depth / 20))
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
