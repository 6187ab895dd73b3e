package submit

import "time"

// Retry-After is a floor, never a target (DESIGN.md invariant 13): after a 429 no report goes
// before it, and the retry is spread by jitter over a window past it. A retry throttled again
// grows the window (the fleet came back together: a throttle naming only its next token tells
// everyone the same time) — in a burst, not far past what is left of it, where the throttle's
// tokens would wait for the retries — one served at once halves it (Retry-After named this agent's turn,
// or the agent is alone: a window kept wide would leave its tokens idle — `bench throttled`).

// retryWindow is what the last 429s taught.
type retryWindow struct {
	window time.Duration // how far past Retry-After a retry is spread
	turnAt time.Time     // when the last 429's Retry-After ended: the earliest the throttle would serve
	named  bool          // the last 429 named a Retry-After (else turnAt is only when it came)
}

const (
	windowGrow   = 2.0 // a retry throttled again
	windowShrink = 0.5 // a retry served at once
	minWindow    = 5 * time.Millisecond
	// crowdSpread bounds the spread of a place taken in a burst whose end the agent has not
	// seen (twice the gathering, in which the crowd at a storm's front forms), and crowdAge how
	// deep in a burst a refusal is still the crowd's: the gathering and that spread.
	crowdSpread = 2 * maxGather
	crowdAge    = maxGather + crowdSpread
)

// throttled is the wait after a 429 with Retry-After ra, answered at arrived: at least ra,
// then a random point of the retry window, which a repeated 429 grows (up to Max). The turn
// it names counts from the answer's arrival (where the throttle put this agent, however late
// a busy host read it); the wait from now, so Retry-After stays a floor.
func (s *Submitter) throttled(now, arrived time.Time, ra time.Duration, again bool) time.Duration {
	s.retry.turnAt, s.retry.named = arrived.Add(ra), ra > 0
	if !s.burst.start.IsZero() {
		// Where the queue of this burst ended when this agent joined it (the last report of a
		// burst joins behind the others' follow-ups): what the fleet's burst takes.
		s.slot.depth = min(max(s.slot.depth, s.retry.turnAt.Sub(s.burst.start)), s.p.Max)
	}
	first := s.retry.window == 0
	if first {
		// The first: over Retry-After itself (a throttle naming its next token tells everyone
		// throttled together the same short time), at least the first backoff step, at most
		// four (a throttle naming turns has spread them already).
		s.retry.window = min(max(ra, s.p.Initial), 4*s.p.Initial)
	}
	left := max(s.slot.at, s.slot.depth) - now.Sub(s.burst.start) // of the fleet's burst, as this agent knows it
	front := s.burst.start.Add(s.slot.front).Sub(now)
	switch {
	case !again && s.burst.open && s.slot.at == 0 && front > ra && ra < s.p.Initial:
		// A burst's first report with no slot refused: the throttle served it at once last
		// time, front into that burst, its host ready while the fleet's were not; now every
		// agent with no slot came at once, more than the bucket holds (bench fleet's agents as
		// processes: 40–60 of 200 at a bucket of 20). Retried within a first step they take
		// the tokens of the agents placed next, and those the next ones', to the storm's end
		// (46–57% of its requests 429). It goes where it was served, as it would have come
		// with its host's delay, and learns that as its slot. Not past a Retry-After of a first
		// step or more: that names a turn kept for this agent (a token bucket's next token, at
		// the rates a fleet is throttled to, comes sooner), and the throttle holds it; gone
		// past it to the front, the agents of a turn-naming throttle learn fronts that bunch
		// (bench fleet --processes under turn: 6 of 8 storms past 25% 429 so, 1 of 8 gated).
		w := front + s.spread(s.slot.front/20)
		s.retry.turnAt = now.Add(w)
		return w
	case !again && !s.retry.named && s.burst.open:
		// A burst's first report refused with nothing named: another agent took its token
		// (early, or late for its own). Retried within a first step it takes the next agent's,
		// and that one the next's: bench fleet's storm under a throttle naming nothing, a
		// fleet a second late to its places, 57% of its requests 429. Spread over what is left
		// of the fleet's burst, it finds a token nobody holds. An agent with a place that has
		// not seen the burst's end (its depth no further than where it stands: places learnt
		// where the throttle served each agent at once, a fleet's first storm after its first
		// start) takes what is left to be as long as the burst has run, and spreads over that
		// and as much again, at most crowdSpread: retried within a first step, the crowd at a
		// storm's front (every agent placed before the stops were gathered) took token after
		// token through the storm (bench fleet at 1,000 agents: 124 placed in the first
		// second, 36% of its requests 429; the fleet model 17–22%, spread so 7–13%). Only
		// within crowdAge: deeper, a refusal is a storm's ordinary one near its end, and a
		// retry spread seconds past that end is what the storm's settle waits for — and,
		// served there, a place past it that a restart and a return replay (make bench at
		// 200 agents, spread at any depth: a restart 1.3× the floor). An agent with no place
		// is in its fleet's first burst, whose retries make the places: spread far, they would
		// leave its front empty. The window stays: a later 429 is no burst's first.
		if age := now.Sub(s.burst.start); left <= s.retry.window && s.slot.at > 0 && age <= crowdAge {
			left = min(2*age, crowdSpread)
		}
		if left > s.retry.window {
			return s.spread(min(left, s.p.Max))
		}
	case again && !first:
		// Throttled again right at Retry-After: the throttle names only its next token (or
		// nothing) and the fleet is queued behind it (a turn is served when it comes). Spread
		// over at least what is left of the fleet's burst, not just twice the window — and, in
		// a burst, over at most that, eight first steps, or an eighth of the streak's age,
		// whichever is most: doubling on, a streak of a dozen 429s sent its retries tens of
		// seconds past the burst while the throttle's tokens waited for them. A streak long
		// past the burst is the control plane asking for less: its age grows the window on, to
		// Max (PROTOCOL.md §3: back off further).
		w := time.Duration(windowGrow * float64(s.retry.window))
		if !s.burst.start.IsZero() {
			w = min(max(w, left), max(left, 8*s.p.Initial, now.Sub(s.streak.since)/8))
		}
		s.retry.window = min(w, s.p.Max)
	}
	return ra + s.spread(s.retry.window)
}
