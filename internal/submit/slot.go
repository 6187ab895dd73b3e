package submit

import "time"

// A burst's first report goes at the agent's slot: how long after a burst of changes began
// (an operator's stop, the tasks starting) the throttle served the burst's first report, the
// last time it had to wait for it. A fleet that comes back in the order the throttle served
// it, at the times it served it, arrives at the throttle's rate: no agent needs to know the
// fleet's size or the rate (each learns only its own place), and the throttle is busy from the
// first instant without a wave of 429s. A report served at its first try had tokens to spare,
// so the slot shrinks (slotProbe) and the fleet packs tighter; one that was kept out takes the
// time it was served as its slot. The reference control plane's Retry-After names each
// client's turn, so a throttled agent learns its place in one 429; under a throttle that names
// only the next token the places come out of the retries (the order is the throttle's, not a
// plan). The shrink is a probe, not a place: burst after burst it moves the agents served at
// once into the seconds the agents kept out learn as their turns, so the slots grow denser
// than the throttle in places (bench fleet, 1,000 agents at 50/s: 65 and 78 slots in one
// second). A storm sorts that out in its own queue; a return from an outage would replay it as
// a herd. So the agent also keeps served, when in its last burst the throttle did serve the
// first report, and a return replays that (outage.go): the throttle's own schedule, at its
// rate. A backlog's later reports go about one learnt spacing apart, at the rate it was served.
//
// A new agent's first burst is the exception to "a place is where the throttle kept an agent
// out". A fleet's first start is where it meets the throttle, every agent new and none placed,
// and the throttle serves at once each agent whose changes come while it has a token, between
// the turns of those it keeps out: where it served them is their place in its schedule, host's
// delay or not. Kept, the fleet's next storm comes back in the throttle's order; dropped, every
// agent served at once came to the storm's front together (bench fleet --processes under
// next-token, a start spread over seconds by 200 agents on 2 cores: 29–44% of the storm's
// requests 429; 0–15% with the places kept). A lone agent pays for it as it pays the gathering:
// its first burst's delay (at most maxFirstPlace) on the first reports of its next bursts,
// until a 429 proves the place or its first gatherBursts bursts pass without one (burst.go).

// slot is the agent's place in the fleet, as the throttle taught it.
type slot struct {
	at     time.Duration // where in a burst the next one's first report goes: the throttle's last turn for it, shrunk while served at once
	served time.Duration // when in its last burst the throttle served this agent's first report: what a return replays
	depth  time.Duration // how long the fleet's last bursts kept the throttle busy, as this agent saw it
	space  time.Duration // learnt spacing of a backlog's reports
	front  time.Duration // with no slot: how far into its last burst its first report, sent at once, was served (retry.go)
}

const (
	slotShrink = 0.95 // a backlog's spacing when served at the first try; the depth at each burst
	// slotProbe is how far a slot shrinks when its burst's first report was served at its
	// first try. Less than the slot's spread (5%, 2.5% on average) so the fleet keeps a little
	// slack: with none, one agent early for its token takes the turn of the next, and every
	// one after it is answered 429 once (a turn-naming throttle queues them all behind it) —
	// bench fleet at 200 agents, shrinking 5% a burst: 35% of the restart's requests 429.
	// The price: a slot learnt long ago fades slowly (halved in about 34 bursts served at once,
	// where 5% took 14) once the control plane stops throttling or the fleet gets smaller.
	slotProbe   = 0.98
	spaceWaited = 0.75 // a backlog's next report keeps this share of how long the last was kept out
	// maxFirstPlace bounds the place a new agent's first burst teaches: a first report later
	// than that waited on its host (an image pull), not on the throttle.
	maxFirstPlace = 10 * time.Second
	wonAfter      = 2 // 429s in a row after which the slot is where the served retry went, not the last turn's end
)

// settledPaced learns from a report that settled (waited: how long the throttle kept it out, 0
// when served at its first try; throttled: after how many 429s) and says when the next report of a backlog may go: about
// one learnt spacing after the last was sent, so an agent with a backlog sends at the rate it
// was served rather than at once into a 429.
func (s *Submitter) settledPaced(now time.Time, waited time.Duration, throttled int) time.Time {
	if s.p.Naive {
		return time.Time{}
	}
	if waited > 0 {
		// The last retry was served at once.
		s.retry.window = max(time.Duration(windowShrink*float64(s.retry.window)), minWindow)
	}
	if s.burst.open && s.outage.burstPlaced {
		// Placed from a return (Answered): when it was served says where the return put it,
		// counted from a burst the outage broke, not the agent's place in the fleet. It
		// teaches neither (the outage's length in its slot and served time would push the
		// agent later with every outage, up to Max).
		s.burst.open = false
	}
	if s.burst.open && !s.burst.start.IsZero() {
		// The burst's first report: its slot.
		if waited > 0 {
			// After one 429, the earliest the throttle would serve it (its Retry-After's end), not
			// when the retry came: the jitter after a turn is this agent's, not its place. After
			// several, the Retry-After named no turn (the next token, or nothing) and the agents
			// throttled with it all learnt its end, where only one was served — and a 429 naming
			// nothing says only when this agent was refused: the place is the one this agent
			// won, when the retry that was served went (learnt from the turn's end,
			// a fleet without turns came back 1.6–2× denser than the throttle into the same
			// 429s). At most Max: a burst kept out longer (minutes of 429s) says the control
			// plane was refusing everyone, not where this agent stands in the fleet.
			won := s.retry.turnAt
			if throttled >= wonAfter || !s.retry.named {
				won = s.send.last
			}
			s.slot.at = min(max(won.Sub(s.burst.start), 0), s.p.Max)
			s.slot.served = s.slot.at
		} else {
			// Served when it was sent, which was at its slot (and its spread, at most 5%)
			// unless the agent had its first change ready only later: the host's delay (a
			// container slow to stop) is not a place in the fleet, and an agent with no
			// slot, which sends at once, has none to replay — but a new agent's first burst,
			// where the fleet meets the throttle, teaches its place (above). (A burst whose
			// first report failed otherwise, in an outage, teaches neither: Done ends it.)
			sent := max(s.send.last.Sub(s.burst.start), 0)
			s.slot.served = min(sent, s.slot.at+s.slot.at/20)
			switch {
			case s.slot.at == 0 && s.gather.met429 == 0 && s.underThrottle():
				// A new agent (no 429 yet, in its first bursts): its place is where the
				// throttle served it.
				s.slot.at = min(sent, maxFirstPlace, s.p.Max)
				s.slot.served = s.slot.at
			case s.slot.at == 0:
				// Not a place, but where a refusal at the front retries (retry.go): within the
				// gathering, as long as a fleet under the throttle holds its first reports.
				s.slot.front = min(sent, maxGather)
			default:
				s.slot.at = time.Duration(slotProbe * float64(s.slot.at))
			}
		}
		if s.slot.at < minWindow {
			s.slot.at = 0
		}
		if s.slot.served < minWindow {
			s.slot.served = 0
		}
		s.burst.open = false
	}
	if waited == 0 {
		s.slot.space = time.Duration(slotShrink * float64(s.slot.space))
	} else {
		s.slot.space = min(max(s.slot.space, time.Duration(spaceWaited*float64(waited))), s.p.Max)
	}
	if s.slot.space < minWindow {
		s.slot.space = 0
		return time.Time{}
	}
	// Jittered on the early side only: a report late for its token leaves it idle, one early
	// is told to wait for it.
	if next := s.send.last.Add(time.Duration(float64(s.slot.space) * (0.5 + 0.5*s.rng.Float64()))); next.After(now) {
		return next
	}
	return time.Time{}
}
