// Package submit is the submitter's policy: when to report the projection's unsent changes,
// how many at once, and how long to wait after an answer that settled nothing. It does no I/O
// and keeps no goroutine: the engine asks it, sends, and tells it the outcome, so a throttled
// wait is a timer in the engine's loop, holding no lock and no slot, and the same code runs on
// a virtual clock in the simulation.
//
// It promises: never more than one report in flight (per-task order holds by construction);
// at least the server's Retry-After after a 429 (a floor, never a target), the retry spread by
// jitter over a window that grows while 429s repeat and shrinks when retries are served at once;
// a burst's first report at the agent's learnt slot in the fleet (pace.go), so a fleet handed one
// stop comes back in the order the throttle served it rather than at one instant, and, while the
// agent meets the throttle (a 429 in one of its last ten bursts, or the agent is new: its first
// ten), waits (at most 1.5 s) for the runtime calls still making the burst's changes, so it
// carries them all in one request (Coming); one backoff shape (internal/jitter: seeded
// jitter, never giving up) that starts afresh when a failure streak changes kind, is replaced
// by about the longest backoff while the control plane answers nothing (the poller probes its
// return), and ends as soon as it answers anything
// (Answered: a successful poll included), each report then going where the throttle last
// served the agent, counted from the return — stretched twice when the report was held in a
// hang shorter than a long poll, whose return the agents with a long poll outliving it and no
// report out never see (pace.go outageWait), but not when its burst began on this host: such
// a burst, waiting for its slot, has the poller poll afresh (Repoll), so every agent whose
// burst began in a hang learns of its return — so the fleet comes back at about the
// throttle's rate; slow retries on refused credentials, changes kept; a report refused as a
// whole (400, 413) split until the change at fault stands alone, which is then held and retried
// alone, slowly, while the others flow (isolate.go); no report body over
// protocol.MaxRequestBody and no reason over protocol.MaxReasonBytes; and one log line per
// change of outcome, not one per attempt.
package submit

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// BatchSize is the most changes one request carries (PROTOCOL.md §3).
const BatchSize = protocol.MaxChangesPerRequest

// Policy tunes the waits. The zero value gets the defaults.
type Policy struct {
	Initial     time.Duration // first retry after an unknown outcome (default 100 ms)
	Max         time.Duration // longest backoff (default 30 s)
	SlowRetry   time.Duration // after 401/403 or 400 (default 30 s)
	JournalEach time.Duration // at most one report_attempted record per failure streak this often (default 30 s)
	Seed        uint64        // jitter generator seed (0: random)
	// PollWait is the poller's long-poll wait and ReturnSpread its longest wait between polls
	// that found the control plane unreachable (the engine's; defaults 20 s and 2 s): what a
	// hang's return is judged by (pace.go outageWait, together).
	PollWait     time.Duration
	ReturnSpread time.Duration
	// Naive is the benchmarks' baseline, what a simple client does: one change a request, a
	// retry every second after any failure, no jitter, Retry-After ignored. Never for agents.
	Naive bool
}

// Submitter decides when to report. Not safe for concurrent use: one engine loop owns it.
type Submitter struct {
	p        Policy
	bo       *jitter.Backoff
	rng      *rand.Rand
	inflight bool
	next     time.Time
	wake     time.Time        // when nothing could be chosen: when a held change is due
	limit    int              // most changes the next report carries (halved by a refusal)
	held     map[string]*held // changes refused alone, by id

	slot        time.Duration // where in a burst the next one's first report goes: the throttle's last turn for it, shrunk while served at once (pace.go)
	served      time.Duration // when in its last burst the throttle served this agent's first report: what a return replays (pace.go)
	window      time.Duration // how far past Retry-After a retry is spread (pace.go)
	depth       time.Duration // how long the fleet's last bursts kept the throttle busy, as this agent saw it (pace.go)
	space       time.Duration // learnt spacing of a backlog's reports (pace.go)
	burst       bool          // the burst's first report is not settled yet: it teaches the slot
	burstStart  time.Time     // when the current burst began
	turnAt      time.Time     // when the last 429's Retry-After ended
	lastSend    time.Time     // when the last report was begun
	carried     bool          // the report in flight carries every change pending when it began
	drained     bool          // the last report carried every pending change and settled
	drainedAt   time.Time     // when it settled
	assignedAt  time.Time     // when a poll last brought payloads
	answeredAt  time.Time     // when a poll was last answered
	placed      int           // failed reports placed at the slot since the last answer (pace.go outageWait)
	coming      bool          // the runtime is making calls whose outcomes are changes (pace.go gathering)
	bursts      int           // bursts begun (pace.go spreadQuiet)
	met429      int           // the burst (of bursts, at least 1) in which a report last met a 429; 0: none, the agent is new; below: a restored place with none lately (pace.go underThrottle)
	hungAt      time.Time     // when a request held by a hanging control plane was last cut (pace.go together)
	stretched   bool          // the last was placed at its slot stretched: held in a hang shorter than a long poll (pace.go outageWait)
	repoll      bool          // a burst this host began waits for its slot: the poller should poll afresh (Repoll)
	repolledAt  time.Time     // the start of the last burst that asked for it
	retryPlaced bool          // the failed report's retry was placed from a return already (pace.go Answered)
	burstPlaced bool          // the burst waiting for its slot was placed from a return already (pace.go Answered)

	streak        protocol.Outcome // the outcome of the current failure streak ("" after success)
	streakSince   time.Time
	streakTries   int
	unjournaled   int
	lastJournaled time.Time
	health        string

	Stats Stats
}

// Stats counts what the submitter saw, for metrics and the dev view.
type Stats struct {
	Requests, Accepted, Rejected, Throttled, Failed uint64
}

// New returns a submitter.
func New(p Policy) *Submitter {
	if p.Initial <= 0 {
		p.Initial = 100 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.SlowRetry <= 0 {
		p.SlowRetry = 30 * time.Second
	}
	if p.JournalEach <= 0 {
		p.JournalEach = 30 * time.Second
	}
	if p.PollWait <= 0 {
		p.PollWait = pollWait
	}
	if p.ReturnSpread <= 0 {
		p.ReturnSpread = returnSpread
	}
	seed := p.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Submitter{p: p, bo: jitter.NewBackoff(p.Initial, p.Max, rng), rng: rng, limit: BatchSize, held: map[string]*held{},
		drained: true} // nothing reported yet: the first changes begin a burst
	if p.Naive {
		s.limit = 1
	}
	return s
}

// Ready reports whether a report may be sent now. It is asked only while changes are pending:
// the first ask after a quiet spell longer than the learnt pace defers the report to a random
// point of one pace (spreadQuiet), so a fleet handed one stop at once does not report at once.
func (s *Submitter) Ready(now time.Time) bool {
	if s.inflight || now.Before(s.next) {
		return false
	}
	ready, began, onHost := s.spreadQuiet(now)
	if began && onHost && !ready {
		s.repoll, s.repolledAt = true, now
	}
	return ready
}

// Repoll says, once a burst, that the poller should cut a long poll begun before it and poll
// again: the burst began now on this host (its containers exited: not a poll's payloads, after
// which the poll is a fresh one anyway) and its first report waits for the agent's slot. A
// long poll begun before a hanging outage is answered as ever after the return, so an agent
// whose report is due only after the return would never learn of the hang, and report at its
// slot counted from the burst while the agents whose reports were held in it come back from
// the return into the same seconds (bench fleet's hanging outage: herd 2.8–3.0, the model's
// hanging-outlived 2.9). A poll begun now is held in the hang and cut at its return with every
// other request (Hung), so the whole fleet places itself from the return. The cost: one more
// poll per agent for a burst its host began, none for a stop the control plane sent.
func (s *Submitter) Repoll() bool {
	r := s.repoll
	s.repoll = false
	return r
}

// NextAttempt is when a waiting submitter may send again (zero when it need not wait); after a
// Begin that chose nothing, when a held change is next due.
func (s *Submitter) NextAttempt() time.Time {
	if s.wake.After(s.next) {
		return s.wake
	}
	return s.next
}

// InFlight reports whether a report awaits its answer.
func (s *Submitter) InFlight() bool { return s.inflight }

// BeginAt chooses what the next report carries from candidates — the projection's pending
// changes, oldest first, as many as Want — marks it in flight and returns its wire form. It
// returns nil, with nothing in flight, when no candidate may go now (each is held or waits
// behind a held change of its task); NextAttempt then says when one is due.
func (s *Submitter) BeginAt(now time.Time, candidates []fsm.Change) []protocol.StateChange {
	if s.gathering(now, len(candidates)) {
		return nil
	}
	out, wake := s.choose(now, candidates, len(candidates) < s.Want())
	s.wake = wake
	if len(out) == 0 {
		return nil
	}
	s.inflight, s.retryPlaced = true, false
	s.lastSend = now
	s.carried = len(out) == len(candidates)
	s.Stats.Requests++
	return out
}

// Outcome is what the engine does with an answer.
type Outcome struct {
	Settled *event.ChangesSettled  // journal this (only the ids that were sent)
	Attempt *event.ReportAttempted // journal this (a failure streak, folded)
	Log     string                 // log this once: the outcome changed
	Next    time.Time              // do not send again before this
}

// Done takes the answer to the report begun with sent.
func (s *Submitter) Done(now time.Time, sent []protocol.StateChange, r protocol.ReportResult) Outcome {
	s.inflight = false
	var o Outcome
	if len(sent) == 0 {
		return o // nothing was sent: nothing to learn
	}
	s.drained = false
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
		s.Stats.Accepted += uint64(len(settled.Accepted))
		s.Stats.Rejected += uint64(len(settled.Rejected))
		if len(settled.Accepted)+len(settled.Rejected) > 0 {
			s.settledHeld(settled.Accepted)
			for _, rj := range settled.Rejected {
				s.settledHeld([]string{rj.ID})
			}
			o.Settled = settled
			if s.streak != "" {
				o.Log = fmt.Sprintf("reports settle again after %d failed attempts (%s since %s)", s.streakTries, s.streak, s.streakSince.Format(time.RFC3339))
			}
			var waited time.Duration // how long the throttle kept these changes out
			if s.streak == protocol.Throttled {
				waited = now.Sub(s.streakSince)
			}
			s.streak, s.health, s.unjournaled, s.streakTries, s.placed, s.stretched = "", "", 0, 0, 0, false
			s.bo.Reset()
			s.next = s.settledPaced(now, waited)
			s.drained, s.drainedAt = s.carried, now
			return o
		}
		// A 200 that settles none of what was sent: not progress, so back off like a failure.
		r.Outcome, r.Err = protocol.ServerError, fmt.Errorf("HTTP 200 settled none of the %d changes sent", len(sent))
	}
	s.Stats.Failed++
	if r.Outcome != protocol.Throttled {
		s.burst = false // its first report's time says nothing of the throttle's order
	}
	if s.streak != "" && s.streak != r.Outcome {
		// A streak of another kind: what grew the backoff is over, so it starts afresh.
		s.bo.Reset()
	}
	var wait time.Duration
	switch {
	case s.p.Naive:
		wait = time.Second
		if r.Outcome == protocol.Throttled {
			s.Stats.Throttled++
		}
	case r.Outcome == protocol.Throttled:
		s.Stats.Throttled++
		s.met429 = max(s.bursts, 1)
		wait = s.throttled(now, ArrivedAt(now, r.ReceivedAt), r.RetryAfter, s.streak == protocol.Throttled)
		s.health = ""
	case r.Outcome == protocol.Unauthorized:
		wait = max(s.bo.NextBackOff(), s.p.SlowRetry)
		s.health = fmt.Sprintf("control plane refuses the agent's credentials (HTTP %d) since %s", r.HTTPStatus, s.sinceOr(now, r.Outcome))
	case r.Outcome == protocol.BadRequest || r.Outcome == protocol.TooLarge:
		// Refused as a whole: split until the change at fault stands alone, then hold it.
		// Not a health problem: the other changes keep flowing.
		var msg string
		wait, msg = s.refused(now, sent, r)
		s.health = ""
		if msg != "" {
			o.Log = msg
		}
	default:
		wait = s.bo.NextBackOff()
		if r.Outcome == protocol.Network {
			wait = s.outageWait(now, wait)
		}
		s.health = ""
	}
	if s.streak != r.Outcome {
		if o.Log == "" {
			o.Log = fmt.Sprintf("reporting state changes: %s: %v", r.Outcome, r.Err)
		}
		s.streak, s.streakSince = r.Outcome, now
		s.lastJournaled = time.Time{}
	}
	s.unjournaled++
	s.streakTries++
	if s.lastJournaled.IsZero() || now.Sub(s.lastJournaled) >= s.p.JournalEach {
		ids := make([]string, len(sent))
		for i, c := range sent {
			ids[i] = c.ID
		}
		errText := ""
		if r.Err != nil {
			errText = r.Err.Error()
		}
		o.Attempt = &event.ReportAttempted{IDs: ids, Outcome: string(r.Outcome), HTTPStatus: r.HTTPStatus, RetryAfter: r.RetryAfter, Error: errText, Count: s.unjournaled}
		s.unjournaled, s.lastJournaled = 0, now
	}
	s.next = now.Add(wait)
	o.Next = s.next
	return o
}

func (s *Submitter) sinceOr(now time.Time, out protocol.Outcome) string {
	if s.streak == out {
		return s.streakSince.Format(time.RFC3339)
	}
	return now.Format(time.RFC3339)
}

// Health is "" when reporting works, else what is wrong (for /healthz and metrics), and
// whether the problem is the agent's credentials rather than the reports themselves. A change
// the control plane refuses alone is such a problem while it is held: its task cannot settle,
// so it is never cleaned up, though the other tasks' changes flow.
func (s *Submitter) Health() (problem string, credentials bool) {
	if s.health == "" && len(s.held) > 0 {
		return s.heldHealth(), false
	}
	return s.health, s.streak == protocol.Unauthorized
}

// Streak is the outcome of the current failure streak and since when ("" when none).
func (s *Submitter) Streak() (protocol.Outcome, time.Time) { return s.streak, s.streakSince }
