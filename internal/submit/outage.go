package submit

import (
	"time"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// A fleet comes back from an outage at the throttle's rate, not in a herd. While nothing
// answers, reports are retried rarely (about the longest backoff) and the poller probes the
// return (a poll costs the control plane no token); the first answer (a poll: Polled) sends
// each report at its served time (slot.go) counted from the return, so the fleet comes back in
// the order the throttle last served it. A hang's return is learnt by every agent at one
// instant, so it is spread further (together), and an agent whose report was held in a hang
// shorter than a long poll makes room for those who never saw it (outageWait).
//
// A burst this host began that waits for its slot has the poller poll afresh (Plan.Repoll):
// the burst began now on this host (its containers exited: not a poll's payloads, after which
// the poll is a fresh one anyway). A long poll begun before a hanging outage is answered as ever
// after the return, so an agent whose report is due only after the return would never learn of
// the hang, and report at its slot counted from the burst while the agents whose reports were
// held in it come back from the return into the same seconds (bench fleet's hanging outage:
// herd 2.8–3.0, the model's hanging-outlived 2.9). A poll begun now is held in the hang and cut
// at its return with every other request (Polled.Held), so the whole fleet places itself from
// the return. The cost: one more poll per agent for a burst its host began, none for a stop
// the control plane sent.

// outageReturn is what the agent knows of the control plane's last return.
type outageReturn struct {
	answeredAt  time.Time // when a poll was last answered
	placed      int       // failed reports placed at the slot since the last answer (outageWait)
	hungAt      time.Time // when a request held by a hanging control plane was last cut (together)
	repolledAt  time.Time // the start of the last burst that asked to poll afresh
	retryPlaced placement // how the failed report's retry was placed (pollAnswered, outageWait)
	burstPlaced bool      // the burst waiting for its slot was placed from a return already (pollAnswered)
}

// placement is how a failed report's retry was placed: from a return a poll saw (final: a
// later answer says nothing new), or at its own failure, the return guessed (a report held and
// cut at a hang's return, or only at its own deadline in a hang still on).
type placement int

const (
	notPlaced      placement = iota
	placedAtCut              // at its failure (outageWait)
	placedByReturn           // from a poll answered after an outage (pollAnswered)
)

const (
	// hung is how long a report must have been held before it failed to count as held by a
	// control plane that is there (a refused connection fails in milliseconds; a report sent just
	// before a hanging outage ends is held only that long).
	hung = 100 * time.Millisecond
	// maxPlaced is how many failed reports in a row are placed at their served time as "the
	// control plane is back" before one is answered or a poll is: a reports path that fails at
	// the transport after holding each report 100 ms (a proxy resetting POSTs while polls pass)
	// is an outage of its own, and retried at its place — 100 ms with none learnt — it would have
	// the fleet retry ten times a second each, its backoff never growing (invariant 13).
	maxPlaced = 2
	// answerFresh is how recent a poll's answer must be for a report that failed at once to
	// count as failing beside a control plane that is there (a connection cut at a hanging
	// outage's return, a broken keep-alive): about the poller's probe interval while nothing
	// answers, so a report failing in an outage the poller has not yet seen is not mistaken.
	answerFresh = 2 * time.Second
	// pollWait is Policy.PollWait's default, the engine's long-poll wait. A long poll begun
	// before a hanging outage is answered as ever up to PollWait after it began: in a hang
	// shorter than that, the agents whose long poll outlives it and who had no report out in it
	// never learn of it (see outageWait).
	pollWait = 20 * time.Second
	// returnSpread is Policy.ReturnSpread's default, the engine poller's longest wait between
	// polls that found the control plane unreachable: how far apart a fleet probing for the
	// return learns of it (together).
	returnSpread = 2 * time.Second
)

// pollAnswered says the control plane answered something (a poll); outage says the poller had
// found it unreachable until now. An outage's backoff is over, and the fleet comes back in the
// order the throttle last served it, from the return: each agent's next report goes at its
// served time (+5%) counted from this answer, whether a retry was due sooner or later, and so
// does a burst still waiting for its slot when the control plane went away (its slot counted
// from before the outage would land the fleet's early and late places on the same seconds) — once
// a burst, so returns that come every few seconds never push its report on for ever. The
// fleet then arrives at about the throttle's rate rather than all in its first seconds (each
// agent's poller learns of the return within a few seconds); an agent with no slot (never
// throttled, or among the first) reports now. (Counting from an estimate of the return —
// halfway since the last failed poll — drains sooner but brings the herd back: 2.8× in the
// model.)
func (s *Submitter) pollAnswered(now time.Time, outage, held bool) {
	cut := s.outage.hungAt // the last cut of a held request: this report's (outageWait) or a poll's
	if held {
		s.outage.hungAt = now // a hang ended: the fleet held in it learns of it at once
	}
	s.outage.answeredAt, s.outage.placed = now, 0
	if s.p.Naive || s.send.inflight {
		return
	}
	switch {
	case s.streak.outcome == protocol.Network && (s.outage.retryPlaced == placedByReturn ||
		s.outage.retryPlaced == placedAtCut && (!outage || now.Sub(cut) <= answerFresh)):
		// Placed from this return already: a later answer says nothing new. Placed again from
		// it, a slot longer than held polls' cuts (every few seconds) would be pushed on for
		// ever, a stretch undone (2.5–2.75 herd in the model), and a report placed at its cut
		// would wait its slot twice when the long poll begun at the return is answered just
		// before it is due (bench fleet, 1,000 agents, a hang's return: one agent at 40 s, the
		// floor 19 s). A poll that found the control plane away, answered long after a report
		// placed at its cut, says that cut was the report's own deadline in the hang, not the
		// return: it is placed again, from this one.
		s.streak.bo.Reset()
		s.outage.retryPlaced = placedByReturn
		return
	case s.streak.outcome == protocol.Network:
		s.streak.bo.Reset()
		s.outage.retryPlaced = placedByReturn
	case outage && s.burst.open && s.streak.outcome == "" && now.Before(s.send.next) && !s.outage.burstPlaced:
		// Once a burst: a control plane (or a proxy) cutting every held poll returns every few
		// seconds, and a slot longer than that, counted again from each return, never came.
		s.outage.burstPlaced = true
	default:
		return
	}
	s.send.next = now.Add(s.slot.served + s.spread(s.slot.served/20) + s.together(now))
}

// together is a random point of returnSpread when the return was learnt from a request held
// in a hang and cut (Polled.Held, or a report's own hold: outageWait), else 0. Agents that probe a
// control plane refusing them learn of its return up to returnSpread apart (the poller's
// jittered interval), and that keeps the fleet's early places off one instant; a hang's
// return is learnt by every agent held in it at one instant, when their requests are cut
// together (bench fleet: 52–54 requests in the first second after a hang, 19–22 after a
// refusal), so the report spreads itself as much.
func (s *Submitter) together(now time.Time) time.Duration {
	if s.outage.hungAt.IsZero() || now.Sub(s.outage.hungAt) > answerFresh {
		return 0
	}
	return s.spread(s.p.ReturnSpread)
}

// outageWait is the wait before retrying a report nothing answered (backoff: the backoff's
// next step): about the longest backoff while the agent has learnt a place in the fleet. The
// poller is the probe of the return (a poll costs the control plane no token), and pollAnswered
// places the report from it; a report retried about once its own place was the probe before,
// and brought the fleet back at R·ln(depth/t) in the first seconds (a herd of 3–4× the rate:
// the early places retry every second).
func (s *Submitter) outageWait(now time.Time, backoff time.Duration) time.Duration {
	back := s.outage.answeredAt.After(s.send.last) || now.Sub(s.send.last) >= hung || (!s.outage.answeredAt.IsZero() && now.Sub(s.outage.answeredAt) < answerFresh)
	if back && s.outage.placed < maxPlaced {
		s.outage.placed, s.outage.retryPlaced = s.outage.placed+1, placedAtCut
		// The control plane answered a poll while this report was on its way or just before
		// it (a report failing within milliseconds of the return of a hanging outage, its
		// connection cut, is not an outage: the long wait left it a tail of 15–45 s), or held
		// the report and then cut it (a hanging outage ends so, at the return): it is back, so
		// the report goes at its served time from now, as pollAnswered would have placed it.
		//
		// Held and cut for less than a long poll's wait, the hang was shorter than pollWait: of
		// the agents whose places were still to come at the return, a share of about
		// 1 − hang/pollWait had their long poll begun before the hang and answered only after
		// it, and no report out in it. They never learn of the hang and report at their places
		// counted from the burst, which began in it — from the return on, at the throttle's
		// rate among them — while this agent, whose place passed in the hang, places its report
		// from the return. At its served time it would double the rate (bench fleet's hanging
		// outage: herd 3.0–3.4): stretched by 1/(1 − share), its share of the fleet leaves the unaware
		// the rest of the throttle. The hang is at least as long as the report was held, so the
		// share is at most 1 − held/pollWait; the stretch is capped at 2 (half the throttle
		// each way: the share is about a half in a hang of half a long poll, and a wider one
		// would leave tokens idle once the unaware are done). No request is added: the evidence
		// is the report's own hold. Not when this burst began on this host and polled afresh
		// (Plan.Repoll): the fleet's agents whose bursts began in the hang did too, and learn of
		// the return with this one, so none is left unaware to make room for.
		slot := s.slot.served
		held := now.Sub(s.send.last)
		if held >= hung {
			s.outage.hungAt = now
		}
		if held >= hung && held < s.p.PollWait && !s.outage.repolledAt.Equal(s.burst.start) {
			slot = time.Duration(min(2, float64(s.p.PollWait)/float64(held)) * float64(slot))
		}
		return max(slot+s.spread(slot/20)+s.together(now), s.p.Initial)
	}
	if max(s.slot.at, s.slot.depth) > 0 {
		return jitter.Spread(s.rng, s.p.Max)
	}
	return backoff
}
