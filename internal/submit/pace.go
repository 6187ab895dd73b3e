package submit

import (
	"time"

	"github.com/agentd/agentd/internal/jitter"
	"github.com/agentd/agentd/internal/protocol"
)

// Under a fleet-wide throttle an agent learns two things from the answers, each protecting
// one promise:
//
//   - its **slot**: how long after a burst of changes began (an operator's stop, the tasks
//     starting) the throttle served the burst's first report, the last time it had to wait for
//     it. The next burst's first report goes at that slot. A fleet that came back in the order
//     the throttle served it, at the times it served it, arrives at the throttle's rate: no
//     agent needs to know the fleet's size or the rate (each learns only its own place), and
//     the throttle is busy from the first instant without a wave of 429s. A report served at
//     its first try had tokens to spare, so the slot shrinks (slotProbe) and the fleet packs
//     tighter; one that was kept out takes the time it was served as its slot. The reference
//     control plane's Retry-After names each client's turn, so a throttled agent learns its
//     place in one 429; under a throttle that names only the next token the places come out
//     of the retries (the order is the throttle's, not a plan). The shrink is a probe, not a
//     place: burst after burst it moves the agents served at once into the seconds the agents
//     kept out learn as their turns, so the slots grow denser than the throttle in places
//     (bench fleet, 1,000 agents at 50/s: 65 and 78 slots in one second). A storm sorts
//     that out in its own queue; a return from an outage would replay it as a herd. So the
//     agent also keeps **served**, when in its last burst the throttle did serve the first
//     report, and a return replays that: the throttle's own schedule, at its rate.
//   - its **retry window**: how far past Retry-After a retry is spread. Retry-After is a floor
//     (DESIGN.md invariant 13), the jitter only after it. A retry that is throttled again
//     doubles the window (the fleet came back together: a throttle naming only its next token
//     tells everyone the same time), one served at once halves it (Retry-After named this
//     agent's turn, or the agent is alone: a window kept wide would leave its tokens idle —
//     `bench throttled`).
//
// While nothing answers, reports are retried rarely (about the longest backoff) and the poller
// probes the return; the first answer from the control plane (a poll) sends each report at its
// served time from the return, so the fleet comes back in the order the throttle served it,
// at its rate, not in a herd.
const (
	slotShrink = 0.95 // a backlog's spacing when served at the first try; the depth at each burst
	// slotProbe is how far a slot shrinks when its burst's first report was served at its
	// first try. Less than the slot's spread (5%, 2.5% on average) so the fleet keeps a little
	// slack: with none, one agent early for its token takes the turn of the next, and every
	// one after it is answered 429 once (a turn-naming throttle queues them all behind it) —
	// bench fleet at 200 agents, shrinking 5% a burst: 35% of the restart's requests 429.
	// The price: a slot learnt long ago fades slowly (halved in about 34 bursts served at once,
	// where 5% took 14) once the control plane stops throttling or the fleet gets smaller.
	slotProbe    = 0.98
	windowGrow   = 2.0  // a retry throttled again
	windowShrink = 0.5  // a retry served at once
	spaceWaited  = 0.75 // a backlog's next report keeps this share of how long the last was kept out
	minWindow    = 5 * time.Millisecond
	// quietGap is how long the agent must have had nothing to report for new changes to
	// begin a burst. Changes that trickle in behind a report just settled (tasks starting one
	// after another) continue the burst: they neither wait for the slot again nor teach it,
	// since where the throttle serves them depends on the fleet's follow-ups, not on its order.
	quietGap = 2 * time.Second
	// maxGather is how long after a burst began its first report may wait for the runtime's
	// calls to end (gathering).
	maxGather = 1500 * time.Millisecond
	// gatherBursts is how many bursts after its reports last met a 429 an agent still gathers:
	// a fleet that paces well meets none for a few bursts and still needs it (a part-report
	// spends a token of the fleet's), and an agent throttled once, long ago, or whose control
	// plane stopped throttling, no longer waits on every burst for the rest of its life.
	gatherBursts = 10
	// maxAssignLag bounds how long after payloads arrived the changes that follow still count
	// from their arrival.
	maxAssignLag = 30 * time.Second
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

// throttled is the wait after a 429 with Retry-After ra, answered at arrived: at least ra,
// then a random point of the retry window, which a repeated 429 grows (up to Max). The turn
// it names counts from the answer's arrival (where the throttle put this agent, however late
// a busy host read it); the wait from now, so Retry-After stays a floor.
func (s *Submitter) throttled(now, arrived time.Time, ra time.Duration, again bool) time.Duration {
	s.turnAt = arrived.Add(ra)
	if !s.burstStart.IsZero() {
		// Where the queue of this burst ended when this agent joined it (the last report of a
		// burst joins behind the others' follow-ups): what the fleet's burst takes.
		s.depth = min(max(s.depth, s.turnAt.Sub(s.burstStart)), s.p.Max)
	}
	switch {
	case s.window == 0:
		// The first: over Retry-After itself (a throttle naming its next token tells everyone
		// throttled together the same short time), at least the first backoff step, at most
		// four (a throttle naming turns has spread them already).
		s.window = min(max(ra, s.p.Initial), 4*s.p.Initial)
	case again:
		// Throttled again right at Retry-After: the throttle names only its next token and the
		// fleet is queued behind it (a turn is served when it comes). Spread over at least
		// what is left of the fleet's burst as this agent knows it, not just twice the window.
		// While the streak is younger than the fleet's burst, never wider than the burst: past
		// it the tokens would wait for the retries. A streak outlasting it is the control plane
		// asking for less: the window grows on, to Max (PROTOCOL.md §3: back off further).
		burst := max(s.slot, s.depth)
		w := time.Duration(windowGrow * float64(s.window))
		if !s.burstStart.IsZero() {
			w = max(w, burst-now.Sub(s.burstStart))
		}
		if burst > 0 && now.Sub(s.streakSince) < burst {
			w = min(w, max(burst, 4*s.p.Initial))
		}
		s.window = min(w, s.p.Max)
	}
	return ra + s.spread(s.window)
}

// settledPaced learns from a report that settled (waited: how long the throttle kept it out,
// 0 when served at its first try) and says when the next report of a backlog may go: about
// one learnt spacing after the last was sent, so an agent with a backlog sends at the rate it
// was served rather than at once into a 429.
func (s *Submitter) settledPaced(now time.Time, waited time.Duration) time.Time {
	if s.p.Naive {
		return time.Time{}
	}
	if waited > 0 {
		// The last retry was served at once.
		s.window = max(time.Duration(windowShrink*float64(s.window)), minWindow)
	}
	if s.burst && s.burstPlaced {
		// Placed from a return (Answered): when it was served says where the return put it,
		// counted from a burst the outage broke, not the agent's place in the fleet. It
		// teaches neither (the outage's length in its slot and served time would push the
		// agent later with every outage, up to Max).
		s.burst = false
	}
	if s.burst && !s.burstStart.IsZero() {
		// The burst's first report: its slot.
		if waited > 0 {
			// The earliest the throttle would serve it (the last Retry-After), not when the
			// retry came: the jitter after Retry-After is this agent's, not its place.
			// At most Max: a burst kept out longer (minutes of 429s) says the control plane was
			// refusing everyone, not where this agent stands in the fleet.
			s.slot = min(s.turnAt.Sub(s.burstStart), s.p.Max)
			s.served = s.slot
		} else {
			// Served when it was sent, which was at its slot (and its spread, at most 5%)
			// unless the agent had its first change ready only later: the host's delay (a
			// container slow to stop) is not a place in the fleet, and an agent with no
			// slot, which sends at once, has none to replay. (A burst whose first report
			// failed otherwise, in an outage, teaches neither: Done ends it.)
			s.served = min(max(s.lastSend.Sub(s.burstStart), 0), s.slot+s.slot/20)
			s.slot = time.Duration(slotProbe * float64(s.slot))
		}
		if s.slot < minWindow {
			s.slot = 0
		}
		if s.served < minWindow {
			s.served = 0
		}
		s.burst = false
	}
	if waited == 0 {
		s.space = time.Duration(slotShrink * float64(s.space))
	} else {
		s.space = min(max(s.space, time.Duration(spaceWaited*float64(waited))), s.p.Max)
	}
	if s.space < minWindow {
		s.space = 0
		return time.Time{}
	}
	// Jittered on the early side only: a report late for its token leaves it idle, one early
	// is told to wait for it.
	if next := s.lastSend.Add(time.Duration(float64(s.space) * (0.5 + 0.5*s.rng.Float64()))); next.After(now) {
		return next
	}
	return time.Time{}
}

// spreadQuiet starts a burst: the first report after the agent had nothing left to report
// (its last report carried every pending change and settled) goes at the agent's slot, and
// ready says whether it may go now. Changes kept waiting by a failure or a backlog go when due.
// began says a burst began here, and onHost that it began on this host (its containers), not
// from a poll's payloads: Ready has the poller poll afresh for such a burst (Repoll).
func (s *Submitter) spreadQuiet(now time.Time) (ready, began, onHost bool) {
	if !s.drained {
		return true, false, false
	}
	s.drained = false
	if now.Sub(s.drainedAt) < quietGap {
		return true, false, false
	}
	start, onHost := now, true
	if s.assignedAt.After(s.drainedAt) && now.Sub(s.assignedAt) < maxAssignLag {
		// The burst follows payloads the control plane sent the whole fleet at one moment:
		// the slot counts from then, not from when this agent, busy or slow, had its first
		// change ready, so the fleet keeps its order however long each agent took.
		start, onHost = s.assignedAt, false
	}
	s.burst, s.burstStart, s.burstPlaced = true, start, false
	s.bursts++
	s.depth = max(s.slot, time.Duration(slotShrink*float64(s.depth)))
	if s.slot == 0 || s.p.Naive {
		return true, true, onHost
	}
	s.next = start.Add(s.slot + s.spread(s.slot/20))
	return !now.Before(s.next), true, onHost
}

// gathering holds the first report of a burst while the runtime is still making the calls
// whose outcomes are its changes (Coming): a stop of every task comes out of a busy host's
// runtime over hundreds of ms, and a first report sent with the first of them spends one of
// the fleet's tokens on a part, the rest following in a second request (the bench's storm: 30
// of 200 agents reported 2 changes, then 18, where the floor counts one request an agent; 25
// extra tokens, and the front of the fleet crowded into 429s). Only under a throttle (the
// agent's reports met a 429 in this burst or one of the gatherBursts before it, or it is new
// to its control plane), only in the burst's first maxGather, never past a full batch.
func (s *Submitter) gathering(now time.Time, n int) bool {
	if !s.coming || !s.burst || s.p.Naive || !s.underThrottle() || !s.lastSend.Before(s.burstStart) || n >= s.limit {
		return false
	}
	until := s.burstStart.Add(maxGather)
	if !now.Before(until) {
		return false
	}
	s.wake = until
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
// arrival waits out another's pull).
func (s *Submitter) underThrottle() bool {
	return s.bursts-s.met429 <= gatherBursts
}

// Coming says whether the runtime is making calls whose outcomes are changes to report (a stop,
// a start): the engine tells it before each report it may send.
func (s *Submitter) Coming(coming bool) { s.coming = coming }

// Assigned says a poll brought payloads, which reached the host at (ReceivedAt): the changes
// that follow begin a burst counted from then (spreadQuiet).
func (s *Submitter) Assigned(at time.Time) { s.assignedAt = at }

// maxArrivalLag bounds how long before it was handled an answer may count as having arrived:
// a busy host reads its answers seconds late (the reason to count from their arrival at all),
// never minutes; a time further back is not an arrival (a clock stepped, a test's virtual
// clock) and the answer counts from now.
const maxArrivalLag = 10 * time.Second

// ArrivedAt is when an answer handled now reached the host, given the transport's measure of
// it (zero: none): that, unless it is implausible (after now, or over maxArrivalLag before).
func ArrivedAt(now, received time.Time) time.Time {
	if received.IsZero() || received.After(now) || now.Sub(received) > maxArrivalLag {
		return now
	}
	return received
}

// Answered says the control plane answered something (a poll); outage says the poller had
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
func (s *Submitter) Answered(now time.Time, outage bool) {
	stretched := s.stretched
	s.answeredAt, s.placed, s.stretched = now, 0, false
	if s.p.Naive || s.inflight {
		return
	}
	switch {
	case s.streak == protocol.Network && stretched:
		// The failed report was placed from the return already, its slot stretched
		// (outageWait): the poll answered after it says nothing new, and re-placing the report
		// at its plain slot would undo the stretch. (Undoing it when this agent's own long
		// poll was held too — its sample of the fleet's — suits a fleet whose long polls
		// began together, and doubles the herd of one whose polls are spread: 2.5–2.75 in
		// the model.)
		s.bo.Reset()
		return
	case s.streak == protocol.Network && s.retryPlaced:
		// Placed from a return already: a later one (held polls cut every few seconds) would
		// push a slot longer than their interval on for ever.
		s.bo.Reset()
		return
	case s.streak == protocol.Network:
		s.bo.Reset()
		s.retryPlaced = true
	case outage && s.burst && s.streak == "" && now.Before(s.next) && !s.burstPlaced:
		// Once a burst: a control plane (or a proxy) cutting every held poll returns every few
		// seconds, and a slot longer than that, counted again from each return, never came.
		s.burstPlaced = true
	default:
		return
	}
	s.next = now.Add(s.served + s.spread(s.served/20) + s.together(now))
}

// Hung says the poller's last poll was held by the control plane and cut: a hanging outage
// ended now.
func (s *Submitter) Hung(now time.Time) { s.hungAt = now }

// together is a random point of returnSpread when the return was learnt from a request held
// in a hang and cut (Hung, or a report's own hold: outageWait), else 0. Agents that probe a
// control plane refusing them learn of its return up to returnSpread apart (the poller's
// jittered interval), and that keeps the fleet's early places off one instant; a hang's
// return is learnt by every agent held in it at one instant, when their requests are cut
// together (bench fleet: 52–54 requests in the first second after a hang, 19–22 after a
// refusal), so the report spreads itself as much.
func (s *Submitter) together(now time.Time) time.Duration {
	if s.hungAt.IsZero() || now.Sub(s.hungAt) > answerFresh {
		return 0
	}
	return s.spread(s.p.ReturnSpread)
}

// outageWait is the wait before retrying a report nothing answered (backoff: the backoff's
// next step): about the longest backoff while the agent has learnt a place in the fleet. The
// poller is the probe of the return (a poll costs the control plane no token), and Answered
// places the report from it; a report retried about once its own place was the probe before,
// and brought the fleet back at R·ln(depth/t) in the first seconds (a herd of 3–4× the rate:
// the early places retry every second).
func (s *Submitter) outageWait(now time.Time, backoff time.Duration) time.Duration {
	// A stretch is this failure's own: one left by an earlier failure would have the poll
	// answered at the return leave this report at its longest backoff (Answered).
	s.stretched = false
	back := s.answeredAt.After(s.lastSend) || now.Sub(s.lastSend) >= hung || (!s.answeredAt.IsZero() && now.Sub(s.answeredAt) < answerFresh)
	if back && s.placed < maxPlaced {
		s.placed++
		// The control plane answered a poll while this report was on its way or just before
		// it (a report failing within milliseconds of the return of a hanging outage, its
		// connection cut, is not an outage: the long wait left it a tail of 15–45 s), or held
		// the report and then cut it (a hanging outage ends so, at the return): it is back, so
		// the report goes at its served time from now, as Answered would have placed it.
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
		// (Repoll): the fleet's agents whose bursts began in the hang did too, and learn of
		// the return with this one, so none is left unaware to make room for.
		slot := s.served
		held := now.Sub(s.lastSend)
		if held >= hung {
			s.hungAt = now
		}
		if held >= hung && held < s.p.PollWait && !s.repolledAt.Equal(s.burstStart) {
			slot = time.Duration(min(2, float64(s.p.PollWait)/float64(held)) * float64(slot))
			s.stretched = true
		}
		return max(slot+s.spread(slot/20)+s.together(now), s.p.Initial)
	}
	if max(s.slot, s.depth) > 0 {
		return jitter.Spread(s.rng, s.p.Max)
	}
	return backoff
}

// Pace is the agent's learnt slot: how long after a burst begins its first report goes, learnt
// from where the throttle served it (0: no throttling seen).
func (s *Submitter) Pace() time.Duration { return s.slot }

// spread is a uniformly random point of d.
func (s *Submitter) spread(d time.Duration) time.Duration {
	return time.Duration(s.rng.Float64() * float64(d))
}
