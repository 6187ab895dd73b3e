package submit

import (
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// The pace is how often the control plane's throttle is likely to serve this agent, learnt
// from its answers as TCP learns its window: a 429 that follows a 429 grows it by paceGrow; a
// report settled at its first try shrinks it by paceShrink; one settled after 429s raises it
// to paceWaited of how long the throttle kept it out (tuned on TestFleetModel's virtual
// fleets and `agentd bench fleet`). It protects three things:
//   - a fleet throttled at one moment comes back spread over one pace, not in the slot
//     Retry-After names (Retry-After stays a floor: the time to the throttle's next token,
//     the same for every agent throttled at that moment);
//   - the pace a fleet learnt outlives the streak, so the next storm (every task of every
//     agent stopped by one operator action) starts spread instead of re-learning it through
//     a wave of 429s;
//   - while nothing answers, retries come at the pace: no herd at the return (the fleet
//     failed together), and every agent finds out within about one pace, its tokens not
//     left idle.
const (
	paceGrow   = 1.3  // a repeated 429's effect on the pace
	paceShrink = 0.9  // a report settled at its first try
	paceWaited = 0.75 // the pace is at least this share of how long a throttled report waited
	paceFloor  = 5 * time.Millisecond
)

// throttled is the wait after a 429 with Retry-After ra: at least ra, then a random point of
// the pace, which a repeated 429 grows (up to Max).
func (s *Submitter) throttled(ra time.Duration, again bool) time.Duration {
	switch {
	case s.pace == 0:
		s.pace = max(ra, s.p.Initial)
	case again:
		s.pace = min(time.Duration(paceGrow*float64(s.pace)), s.p.Max)
	}
	return ra + s.spread(s.pace)
}

// paced is when the next report may go after one settled (waited: how long the throttle
// kept it out, 0 when served at the first try): the pace learns, and the next request keeps
// about one pace from the last (jittered), so an agent with a backlog sends at the rate it
// learnt rather than at once into a 429.
func (s *Submitter) paced(now time.Time, waited time.Duration) time.Time {
	if s.pace == 0 || s.p.Naive {
		return time.Time{}
	}
	if waited == 0 {
		// Served at the first try: there are tokens to spare, so ask a little faster.
		s.pace = time.Duration(float64(s.pace) * paceShrink)
	} else {
		// The throttle kept this report out for waited: it serves this agent no faster.
		s.pace = min(max(s.pace, time.Duration(paceWaited*float64(waited))), s.p.Max)
	}
	if s.pace < paceFloor {
		s.pace = 0
		return time.Time{}
	}
	if next := s.lastSend.Add(s.jittered(s.pace)); next.After(now) {
		return next
	}
	return time.Time{}
}

// spreadQuiet defers the first report after the agent had nothing left to report (its last
// report carried every pending change and settled) to a random point of one pace, and says
// whether it may go now: a fleet handed one stop at once does not report at once. Changes
// kept waiting by a failure or a backlog go when due.
func (s *Submitter) spreadQuiet(now time.Time) bool {
	if s.pace == 0 || !s.drained {
		return true
	}
	s.drained = false
	s.next = now.Add(s.spread(s.pace))
	return !now.Before(s.next)
}

// Answered says the control plane answered something (a poll): an outage's backoff is over,
// and the report goes at a random point of the pace — the whole fleet sees the control plane
// come back at the same moment.
func (s *Submitter) Answered(now time.Time) {
	if s.p.Naive || s.streak != protocol.Network || s.inflight || !now.Before(s.next) {
		return
	}
	s.bo.Reset()
	s.next = now.Add(s.spread(s.pace))
}

// Pace is the learnt spacing of this agent's requests (0: no throttling seen).
func (s *Submitter) Pace() time.Duration { return s.pace }

// spread is a uniformly random point of d.
func (s *Submitter) spread(d time.Duration) time.Duration {
	return time.Duration(s.rng.Float64() * float64(d))
}
