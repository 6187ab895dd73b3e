package submit

import "time"

// A burst's first report carries the burst's changes, not the first of them: while the agent
// meets the throttle it waits (at most maxGather) for the runtime calls still making them, so
// it spends one of the fleet's tokens, not two.

// gathering is what the wait is judged by.
type gathering struct {
	met429 int // the burst (of burst.count, at least 1) in which a report last met a 429; 0: none, the agent is new; below: a restored place with none lately (underThrottle)
}

const (
	// maxGather is how long after a burst began its first report may wait for the runtime's
	// calls to end (gathering).
	maxGather = 1500 * time.Millisecond
	// gatherBursts is how many bursts after its reports last met a 429 an agent still gathers:
	// a fleet that paces well meets none for a few bursts and still needs it (a part-report
	// spends a token of the fleet's), and an agent throttled once, long ago, or whose control
	// plane stopped throttling, no longer waits on every burst for the rest of its life.
	gatherBursts = 10
)

// gathers holds the first report of a burst while the runtime is still making the calls whose
// outcomes are its changes (coming: Report.Coming): a stop of every task comes out of a busy
// host's runtime over hundreds of ms, and a first report sent with the first of them spends
// one of the fleet's tokens on a part, the rest following in a second request (the bench's
// storm: 30 of 200 agents reported 2 changes, then 18, where the floor counts one request an
// agent; 25 extra tokens, and the front of the fleet crowded into 429s). Only under a throttle
// (the agent's reports met a 429 in this burst or one of the gatherBursts before it, or it is
// new to its control plane), only in the burst's first maxGather, never past a full batch.
func (s *Submitter) gathers(now time.Time, n int, coming bool) bool {
	if !coming || !s.burst.open || s.p.Naive || !s.underThrottle() || !s.send.last.Before(s.burst.start) || n >= s.isolate.limit {
		return false
	}
	until := s.burst.start.Add(maxGather)
	if !now.Before(until) {
		return false
	}
	s.send.wake = until
	return true
}

// underThrottle says whether the agent's reports met a 429 in this burst or one of the
// gatherBursts before it. An agent new to its control plane counts as having met one as it
// started (met429 0): a fleet's first start of its tasks is where it meets the throttle, every
// agent at once, and the first agents, served from the throttle's burst with the first of
// their changes, each took a turn for the rest (bench fleet's start round at 200 agents:
// 20–25 such follow-ups, turns the storm then left idle, the schedule it learnt 1.3 s longer
// than the floor of 9 s); served at once there, they met no 429 and sent their storm's stop in
// two requests again. An agent whose control plane does not throttle reports at once from its
// eleventh burst on (a lone agent's latency) — its eleventh since it started, as it keeps no
// place to say it met none — and until then holds a burst's first report at most maxGather,
// only while a call that makes changes is out on the host (any task's: a task stopped on
// arrival waits out another's pull), and for the place its first burst taught (slot.go).
func (s *Submitter) underThrottle() bool {
	return s.burst.count-s.gather.met429 <= gatherBursts
}
