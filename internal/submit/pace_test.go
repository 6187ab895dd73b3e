package submit

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// throttledBurst plays one burst begun by payloads at start: the first change is ready at
// start+lag, its report is answered 429 with a Retry-After of ra, and the retry is served.
// It returns when the retry was served.
func throttledBurst(t *testing.T, s *Submitter, start time.Time, lag, ra time.Duration) time.Time {
	t.Helper()
	s.Assigned(start)
	now := start.Add(lag)
	for !s.Ready(now) {
		now = s.NextAttempt()
	}
	sent := s.BeginAt(now, batch("c-1"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: ra})
	now = s.NextAttempt()
	sent = s.BeginAt(now, batch("c-1"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
	return now
}

// An agent learns its slot — when after the payloads arrived the throttle would serve its
// burst's first report (its Retry-After's end, not its own jitter after it) — and the next
// burst's first report goes there, counted from the payloads' arrival, however long the agent
// took to have its changes ready; a burst served at its first try shrinks the slot.
func TestSlotPlacesTheNextBurstWhereTheThrottleServedTheLast(t *testing.T) {
	s := New(Policy{Seed: 11})
	throttledBurst(t, s, t0, 100*time.Millisecond, 3*time.Second)
	if got, want := s.Pace(), 3100*time.Millisecond; got != want {
		t.Fatalf("slot %v after a first report sent 100 ms after the payloads and told 3 s; want %v", got, want)
	}
	next := t0.Add(time.Minute)
	s.Assigned(next)
	ready := next.Add(700 * time.Millisecond) // this agent was slow to stop its containers
	if s.Ready(ready) {
		t.Fatal("the next burst's first report goes at once, not at its slot")
	}
	if at := s.NextAttempt().Sub(next); at < 3100*time.Millisecond || at > 3100*time.Millisecond*105/100 {
		t.Fatalf("the next burst's first report goes %v after the payloads; want its slot, 3.1 s (+5%%)", at)
	}
	now := s.NextAttempt()
	sent := s.BeginAt(now, batch("c-2"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-2"}})
	if got, want := s.Pace(), time.Duration(slotProbe*float64(3100*time.Millisecond)); got != want {
		t.Fatalf("slot %v after a burst served at its first try; want it shrunk to %v", got, want)
	}
}

// A busy host reads its answers late: the payloads that began the burst and the 429 naming
// the agent's turn both reached it well before it got to them. The place counts from their
// arrivals — where the control plane put this agent — and not from the reads, which on a
// loaded host move by seconds from one burst to the next.
func TestAPlaceCountsFromWhenTheAnswersArrivedNotWhenTheyWereRead(t *testing.T) {
	s := New(Policy{Seed: 11})
	arrived := t0
	s.Assigned(ArrivedAt(t0.Add(1500*time.Millisecond), arrived)) // read 1.5 s late
	now := t0.Add(1600 * time.Millisecond)
	for !s.Ready(now) {
		now = s.NextAttempt()
	}
	sent := s.BeginAt(now, batch("c-1"))
	// The 429 reached the host 10 ms after the report left, and was read 800 ms later: its
	// turn is 3 s from its arrival.
	answered := now.Add(10 * time.Millisecond)
	read := answered.Add(800 * time.Millisecond)
	s.Done(read, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 3 * time.Second, ReceivedAt: answered})
	if retry := s.NextAttempt(); retry.Before(read.Add(3 * time.Second)) {
		t.Fatalf("retry %v after the read; Retry-After is a floor from when the agent read it (3 s)", retry.Sub(read))
	}
	now = s.NextAttempt()
	sent = s.BeginAt(now, batch("c-1"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}, ReceivedAt: now})
	if got, want := s.Pace(), answered.Add(3*time.Second).Sub(arrived); got != want {
		t.Fatalf("slot %v; want %v: from the payloads' arrival to the turn counted from the 429's arrival (from the reads: %v)",
			got, want, read.Add(3*time.Second).Sub(t0.Add(1500*time.Millisecond)))
	}
}

// An arrival the transport measured counts only when it is plausible: not after the read, not
// more than maxArrivalLag before it (a stepped clock, a test's virtual one).
func TestAnArrivalCountsOnlyWhenPlausible(t *testing.T) {
	now := t0.Add(time.Hour)
	for _, tc := range []struct {
		name          string
		received, got time.Time
	}{
		{"unknown", time.Time{}, now},
		{"read at once", now, now},
		{"read 2 s late", now.Add(-2 * time.Second), now.Add(-2 * time.Second)},
		{"read at the longest lag", now.Add(-maxArrivalLag), now.Add(-maxArrivalLag)},
		{"further back than any busy host", now.Add(-maxArrivalLag - time.Millisecond), now},
		{"after the read", now.Add(time.Millisecond), now},
	} {
		if got := ArrivedAt(now, tc.received); !got.Equal(tc.got) {
			t.Errorf("%s: ArrivedAt = %v from now; want %v", tc.name, got.Sub(now), tc.got.Sub(now))
		}
	}
}

// Changes that trickle in right behind a report that settled everything (tasks starting one
// after another) continue the burst: where the throttle serves them depends on the fleet's
// other follow-ups, so they do not teach the slot.
func TestTricklingChangesContinueTheBurst(t *testing.T) {
	s := New(Policy{Seed: 12})
	served := throttledBurst(t, s, t0, 0, 2*time.Second)
	slot := s.Pace()
	if slot == 0 {
		t.Fatal("no slot learnt: the check would see nothing")
	}
	now := served.Add(300 * time.Millisecond)
	for !s.Ready(now) { // paced behind the last report, then asked again
		now = s.NextAttempt()
	}
	sent := s.BeginAt(now, batch("c-2"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 5 * time.Second})
	now = s.NextAttempt()
	sent = s.BeginAt(now, batch("c-2"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-2"}})
	if s.Pace() != slot {
		t.Fatalf("slot %v after a trickled change was kept out 5 s; want it unchanged, %v: the trickle began a burst", s.Pace(), slot)
	}
}

// The retry window past Retry-After doubles while retries are throttled again (a throttle
// naming its next token tells everyone the same time) and halves when a retry is served at
// once (a turn, or an agent alone) — so a lone agent's retries come right at Retry-After
// and leave none of its tokens idle (bench throttled).
func TestRetryWindowFollowsWhetherRetriesAreServed(t *testing.T) {
	s := New(Policy{Seed: 13})
	now := t0
	throttle := func() {
		sent := s.BeginAt(now, batch("c-1"))
		s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 50 * time.Millisecond})
		now = s.NextAttempt()
	}
	throttle()
	first := s.RetryWindow()
	throttle()
	throttle()
	if w := s.RetryWindow(); w != 4*first {
		t.Fatalf("window %v after three 429s in a row; want %v (doubled twice from %v)", w, 4*first, first)
	}
	for i := 0; i < 6; i++ {
		sent := s.BeginAt(now, batch("c-1"))
		s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
		throttle()
	}
	if w := s.RetryWindow(); w > first/4 {
		t.Fatalf("window %v after six retries served at once; want it shrunk well below the first %v", w, first)
	}
}

// While nothing answers, an agent that has learnt its place retries its report rarely (about
// once the longest backoff: the poller is the cheap probe of the return), and the first poll
// answered places the report at the agent's slot counted from that answer — not at once, which
// brought the whole fleet back in its first seconds (herd 3–4× the rate), nor when a grown
// backoff ends.
func TestOutageRetriesComeRarelyAndTheReturnPlacesThemBySlot(t *testing.T) {
	s := New(Policy{Seed: 14})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	now := t0.Add(time.Minute)
	for i := 0; i < 3; i++ {
		if i > 0 {
			now = s.NextAttempt()
		}
		sent := s.BeginAt(now, batch("c-9"))
		s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
		if w := s.NextAttempt().Sub(now); w < s.p.Max/2 {
			t.Fatalf("retry %d after a refused connection waits %v; want about the longest backoff, %v (±50%%)", i, w, s.p.Max)
		}
	}
	back := now.Add(time.Second)
	s.Answered(back, true)
	if at := s.NextAttempt().Sub(back); at < slot || at > slot*105/100 {
		t.Fatalf("after the return the report goes %v after the answered poll; want its slot, %v (+5%%)", at, slot)
	}
}

// A burst served at its first try shrinks the slot, so the next burst tries earlier — but a
// return from an outage replays where the throttle last served the agent, not the shrunk slot:
// the fleet's first-try agents, shrinking burst after burst into the seconds that agents kept
// out learn as their turns, made the learnt slots denser than the throttle (65–78 agents a
// second where it serves 50, bench fleet at 1,000 agents) and the return replayed that
// density (hanging herd 2.28).
func TestTheReturnReplaysWhereTheThrottleLastServed(t *testing.T) {
	s := New(Policy{Seed: 17})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	var servedAfter time.Duration // the last burst's first report, after its payloads
	for i := 1; i <= 3; i++ {
		start := t0.Add(time.Duration(i) * time.Minute)
		s.Assigned(start)
		now := start
		for !s.Ready(now) {
			now = s.NextAttempt()
		}
		s.Done(now, s.BeginAt(now, batch("c-1")), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
		servedAfter = now.Sub(start)
	}
	if slot := s.Pace(); slot >= servedAfter*95/100 {
		t.Fatalf("slot %v after three bursts served at their first try, the last %v after its payloads; the test needs it shrunk", slot, servedAfter)
	}
	// Two outages, each while a burst of the host's own began (its containers exited): the
	// report settled after the first return was sent where that return placed it, which says
	// nothing new of the fleet, so the second return replays the same place.
	for i, id := range []string{"c-9", "c-10"} {
		now := t0.Add(time.Duration(10+10*i) * time.Minute)
		for !s.Ready(now) {
			now = s.NextAttempt()
		}
		s.Done(now, s.BeginAt(now, batch(id)), protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
		back := now.Add(time.Second)
		s.Answered(back, true)
		if at := s.NextAttempt().Sub(back); at < servedAfter || at > servedAfter*105/100 {
			t.Fatalf("outage %d: after the return the report goes %v after the answered poll; want where the throttle last served it, %v (+5%%), not the shrunk slot %v", i+1, at, servedAfter, s.Pace())
		}
		now = s.NextAttempt()
		s.Done(now, s.BeginAt(now, batch(id)), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{id}})
	}
}

// A hostile or broken control plane naming a 10-minute turn (protocol.MaxRetryAfter) teaches no
// place past the longest backoff: the next return places the report within Max (+5%), not ten
// minutes after every outage (the agent's STOPPED, and its cleanup behind the ack, parked).
func TestAnAbsurdTurnPlacesTheReturnWithinTheLongestBackoff(t *testing.T) {
	s := New(Policy{Seed: 20})
	throttledBurst(t, s, t0, 0, protocol.MaxRetryAfter)
	now := t0.Add(time.Hour)
	s.Done(now, s.BeginAt(now, batch("c-9")), protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
	back := now.Add(time.Second)
	s.Answered(back, true)
	if at := s.NextAttempt().Sub(back); at > s.p.Max*105/100 {
		t.Fatalf("after a %v turn, the return places the report %v later; want at most the longest backoff, %v (+5%%)", protocol.MaxRetryAfter, at, s.p.Max)
	}
}

// A burst waiting for its slot when the control plane went away is placed from the return
// (Answered) and served there at its first try: that teaches no place — counted from the burst,
// which the outage broke, it would carry the outage's length, and every outage would push the
// agent later — so the next return replays the same served time.
func TestABurstPlacedFromAReturnTeachesNoPlace(t *testing.T) {
	s := New(Policy{Seed: 18})
	throttledBurst(t, s, t0, 0, 6*time.Second)
	place := s.Pace()
	for i, id := range []string{"c-2", "c-3"} {
		start := t0.Add(time.Duration(1+i) * time.Minute)
		s.Assigned(start)
		if s.Ready(start) {
			t.Fatal("the burst's first report goes at once; the test needs it waiting for its slot")
		}
		back := start.Add(2 * time.Second) // the control plane went away and came back meanwhile
		s.Answered(back, true)
		if at := s.NextAttempt().Sub(back); at < place || at > place*105/100 {
			t.Fatalf("return %d: the burst's first report goes %v after it; want where the throttle last served it, %v (+5%%)", i+1, at, place)
		}
		now := s.NextAttempt()
		s.Done(now, s.BeginAt(now, batch(id)), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{id}})
		if s.Pace() != place {
			t.Fatalf("return %d: slot %v after a burst placed from the return; want it unchanged, %v", i+1, s.Pace(), place)
		}
	}
}

// An agent the throttle never kept out has no place to replay: after an outage its report goes
// as soon as the control plane answers, even though its last burst's first change was ready
// only seconds after the payloads (a container slow to stop is the host's delay, not a place).
func TestAnAgentWithNoPlaceReportsAtTheReturn(t *testing.T) {
	s := New(Policy{Seed: 19})
	s.Assigned(t0)
	ready := t0.Add(2 * time.Second)
	if !s.Ready(ready) {
		t.Fatal("an agent with no slot waits to report")
	}
	s.Done(ready, s.BeginAt(ready, batch("c-1")), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
	now := t0.Add(time.Minute)
	if !s.Ready(now) {
		t.Fatal("an agent with no slot waits to report")
	}
	s.Done(now, s.BeginAt(now, batch("c-2")), protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
	back := now.Add(5 * time.Second)
	s.Answered(back, true)
	if !s.Ready(back) {
		t.Fatalf("after the return the report waits %v; want it at once", s.NextAttempt().Sub(back))
	}
}

// 20 agents that learnt distinct places in the fleet (a throttle naming turns 1/rps apart) and
// are back from an outage at the same moment spread their first reports over the fleet's
// window, in their places' order — not all in one slot — and each at least at its place.
func TestAgentsBackFromAnOutageSpreadTheirFirstReports(t *testing.T) {
	const rps = 20
	var firsts []time.Duration
	back := t0.Add(2 * time.Minute)
	for i := 0; i < 20; i++ {
		s := New(Policy{Seed: uint64(100 + i)})
		place := time.Duration(i+1) * time.Second / rps * 10 // 0.5 s … 10 s: a fleet of 200 at 20/s
		throttledBurst(t, s, t0, 0, place)
		now := t0.Add(time.Minute)
		sent := s.BeginAt(now, batch("c-9"))
		s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
		s.Answered(back, true)
		firsts = append(firsts, max(s.NextAttempt().Sub(back), 0)) // a retry due before the return goes at it
	}
	busiest := 0
	for _, n := range slots(durationsFrom(back, firsts), back, time.Second) {
		busiest = max(busiest, n)
	}
	if spread := slices.Max(firsts) - slices.Min(firsts); spread < 9*time.Second || busiest > 3 {
		t.Fatalf("20 agents back from an outage send their first reports within %v, up to %d in one second (%v); want them over the fleet's ~10 s", spread, busiest, firsts)
	}
}

// A burst still waiting for its slot when the control plane went away is placed from the
// return too: counted from before the outage, the late places would land on the seconds the
// early places take after the return.
func TestABurstWaitingForItsSlotIsPlacedFromTheReturn(t *testing.T) {
	s := New(Policy{Seed: 15})
	throttledBurst(t, s, t0, 0, 6*time.Second)
	slot := s.Pace()
	start := t0.Add(time.Minute)
	s.Assigned(start)
	if s.Ready(start) {
		t.Fatal("the burst's first report goes at once; the test needs it waiting for its slot")
	}
	back := start.Add(2 * time.Second)
	s.Answered(back, false)
	if at := s.NextAttempt().Sub(start); at > slot*105/100 {
		t.Fatalf("a poll answered with no outage moved the slot to %v after the burst began; want it kept at %v", at, slot)
	}
	s.Answered(back, true)
	if at := s.NextAttempt().Sub(back); at < slot || at > slot*105/100 {
		t.Fatalf("after an outage the burst's first report goes %v after the return; want its slot, %v", at, slot)
	}
}

// A model fleet of 200 agents against the reference control plane's throttle naming turns
// (virtual clock, seeded): after the tasks start under it once, a fleet-wide stop settles
// within the targets — ≤ 1.25× the floor, ≤ 25% of requests answered 429 — twice in a
// row. (The real bench, `agentd-bench fleet`, judges the same on real HTTP.)
func TestFleetModelStormMeetsTheTargetsUnderTurns(t *testing.T) {
	const n, rps, burst = 200, 20.0, 20
	floor := (n - burst) / rps
	m := newFleetModel(n, rps, burst, Policy{}, 1, controlplane.RetryAfterTurn)
	for round := 1; round <= 2; round++ {
		m.waves(20, 3, 100*time.Millisecond)
		m.quiet(30 * time.Second)
		r0, th0 := m.requests, m.throttle
		d, _ := m.storm(20)
		m.quiet(30 * time.Second)
		share := float64(m.throttle-th0) / float64(m.requests-r0)
		if x := d.Seconds() / floor; x > 1.25 || share > 0.25 {
			t.Fatalf("round %d: the storm took %.2f× the floor with %.0f%% of %d requests answered 429; want ≤ 1.25× and ≤ 25%%", round, x, 100*share, m.requests-r0)
		}
	}
}

// A report caught in a hanging outage fails only at the return, after a poll was answered: the
// control plane is back, so the report goes at its slot from then — not a longest backoff
// later, as a report that nothing answered would (bench fleet's hanging outage drained at 2.8×
// its floor, its last agents a whole backoff late).
func TestAReportFailingAfterTheReturnGoesAtItsSlot(t *testing.T) {
	s := New(Policy{Seed: 16})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	sent := t0.Add(time.Minute)
	out := s.BeginAt(sent, batch("c-9"))
	back := sent.Add(10 * time.Second)
	s.Answered(back, true) // a poll answered while the report hangs
	failed := back.Add(10 * time.Millisecond)
	s.Done(failed, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection reset by peer")})
	// Held 10 s, shorter than a long poll: its slot stretched twice, and spread over
	// returnSpread as every agent held in the hang learnt of its return at once (pace.go).
	if at := s.NextAttempt().Sub(failed); at < 2*slot || at > 2*slot*105/100+returnSpread {
		t.Fatalf("a report failing after a poll was answered retries %v later; want its slot stretched, %v (+5%%, + up to %v)", at, 2*slot, returnSpread)
	}
}

// A report held by a hanging control plane and cut at its return, while the agent's long poll
// begun before the outage has not failed, goes at its slot from then too — not a longest
// backoff later (the hanging outage's last agents came 15–25 s after the return, 2.8× the floor).
// Held for less than a long poll's wait, the slot is stretched twice: the agents whose long polls
// outlived the hang report at their places unaware of it, and take half the throttle
// (TestFleetModelOutageComesBackAtTheRate); a poll answered after the cut leaves it so placed.
func TestAReportHeldAndCutGoesAtItsSlot(t *testing.T) {
	s := New(Policy{Seed: 17})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	sent := t0.Add(time.Minute)
	for _, c := range []struct {
		held    time.Duration
		stretch time.Duration
	}{{5 * time.Second, 2}, {300 * time.Millisecond, 2}, {45 * time.Second, 1}} { // sent just before the return; a long hang
		out := s.BeginAt(sent, batch("c-9"))
		cut := sent.Add(c.held)
		s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")})
		placed := s.NextAttempt()
		s.Answered(cut.Add(250*time.Millisecond), true) // the poller learns of the return
		if c.stretch > 1 && s.NextAttempt() != placed {
			t.Fatalf("a report held %v and cut, placed at +%v, was re-placed at +%v by the poll answered after", c.held, placed.Sub(cut), s.NextAttempt().Sub(cut))
		}
		if at, want := placed.Sub(cut), c.stretch*slot; at < want || at > want*105/100+returnSpread {
			t.Fatalf("a report held %v and cut retries %v later; want its slot ×%d, %v (+5%%, + up to %v)", c.held, at, c.stretch, want, returnSpread)
		}
		sent = s.NextAttempt()
	}
}

// The stretch is judged by the poller's own long-poll wait (Policy.PollWait), not a copy of the
// engine's default: with a 2 s long poll (agentd dev), a report held 3 s in a hang outlived
// every long poll, so no agent was unaware of it and its slot is not stretched.
func TestAHangIsJudgedByThePollersOwnWait(t *testing.T) {
	s := New(Policy{Seed: 17, PollWait: 2 * time.Second, ReturnSpread: time.Millisecond})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	sent := t0.Add(time.Minute)
	out := s.BeginAt(sent, batch("c-9"))
	cut := sent.Add(3 * time.Second)
	s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")})
	if at := s.NextAttempt().Sub(cut); at < slot || at > slot*105/100+time.Millisecond {
		t.Fatalf("a report held 3 s, longer than the 2 s long poll, and cut retries %v later; want its plain slot %v", at, slot)
	}
}

// A report that fails at once just after a poll was answered (its connection cut at a hanging
// outage's return, a broken keep-alive) goes at its slot, not a longest backoff later (the
// hanging outage left a tail of 25 s so); one that fails at once long after the last answered
// poll is in an outage, and waits about the longest backoff.
func TestAReportFailingBesideAnAnsweredPollGoesAtItsSlot(t *testing.T) {
	s := New(Policy{Seed: 18})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	back := t0.Add(time.Minute)
	s.Answered(back, true)
	sent := back.Add(300 * time.Millisecond)
	out := s.BeginAt(sent, batch("c-9"))
	failed := sent.Add(5 * time.Millisecond)
	s.Done(failed, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection reset by peer")})
	if at := s.NextAttempt().Sub(failed); at < slot || at > slot*105/100 {
		t.Fatalf("a report failing 300 ms after an answered poll retries %v later; want its slot, %v (+5%%)", at, slot)
	}
	sent = back.Add(10 * time.Second)
	out = s.BeginAt(sent, batch("c-9"))
	failed = sent.Add(5 * time.Millisecond)
	s.Done(failed, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")})
	if w := s.NextAttempt().Sub(failed); w < s.p.Max/2 {
		t.Fatalf("a report refused 10 s after the last answered poll retries %v later; want about the longest backoff, %v", w, s.p.Max)
	}
}

// A reports path that holds each report and then fails it at the transport, while polls pass
// (a proxy resetting POSTs after 200 ms), is an outage of its own: after two reports placed at
// the slot, the waits grow with the backoff instead of coming every slot — 100 ms for an agent
// that learnt none, ten requests a second from every agent of the fleet (invariant 13).
// An answered poll allows the slot again, once more.
func TestAReportsPathThatKeepsCuttingBacksOff(t *testing.T) {
	s := New(Policy{Seed: 19})
	sent := t0
	var waits []time.Duration
	for range 8 {
		out := s.BeginAt(sent, batch("c-9"))
		cut := sent.Add(200 * time.Millisecond)
		s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection reset by peer")})
		waits = append(waits, s.NextAttempt().Sub(cut))
		sent = s.NextAttempt()
	}
	if last := waits[len(waits)-1]; last < 2*time.Second {
		t.Fatalf("eight reports cut after 200 ms, no poll answered: waits %v; want the backoff grown past 2 s by the last", waits)
	}
	s.Answered(sent, false)
	out := s.BeginAt(sent.Add(time.Second), batch("c-9"))
	cut := sent.Add(time.Second + 200*time.Millisecond)
	s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection reset by peer")})
	if w := s.NextAttempt().Sub(cut); w > time.Second+returnSpread {
		t.Fatalf("after an answered poll a cut report retries %v later; want its slot again (at most 1 s with none learnt, + up to %v: the report was held, together)", w, returnSpread)
	}
}

// stopChanges is n changes, two a task (the container's STOPPED and the task's), as a stop of n/2
// tasks makes them.
func stopChanges(n int) []fsm.Change {
	out := make([]fsm.Change, n)
	for i := range out {
		out[i] = fsm.Change{ID: fmt.Sprintf("c-%d", i), Task: fmt.Sprintf("task/%d", i/2), Status: "STOPPED", At: t0}
	}
	return out
}

// A fleet agent's first report of a burst waits while the runtime is still making the calls
// whose outcomes are its changes: a stop of ten tasks on a busy host comes out over hundreds
// of ms, and a first report sent with the first task's two changes spent a token of the
// fleet's on a part, the other 18 following in a second request (the bench's storm: 30 of 200
// agents so, 25 extra tokens where the floor counts one request an agent, and the fleet's
// front crowded into 429s). The wait ends with the calls and is bounded (for whom it is:
// TestGatheringLastsWhileTheAgentMeetsTheThrottle, TestANewAgentGathersItsFirstBurstsAsIfThrottled).
func TestAFleetAgentsFirstReportWaitsForTheBurstsChanges(t *testing.T) {
	s := New(Policy{Seed: 5})
	throttledBurst(t, s, t0, 100*time.Millisecond, 100*time.Millisecond) // a fleet agent, at the front (slot ≈ 0.2 s)
	stop := t0.Add(time.Minute)
	s.Assigned(stop)
	now := stop.Add(300 * time.Millisecond) // past its slot: the first task stopped
	s.Coming(true)                          // nine stops still out
	if !s.Ready(now) {
		t.Fatalf("the burst's first report is not ready at %v, past its slot (%v)", now.Sub(stop), s.Pace())
	}
	if sent := s.BeginAt(now, stopChanges(2)); sent != nil {
		t.Fatalf("sent %d of the burst's changes while its stops were still out; want it to wait for them", len(sent))
	}
	if at := s.NextAttempt(); at.Before(now) || at.Sub(stop) > maxGather {
		t.Fatalf("waiting until %v after the stop; want a wait bounded by %v", at.Sub(stop), maxGather)
	}
	now = stop.Add(700 * time.Millisecond) // the last stop ended
	s.Coming(false)
	if !s.Ready(now) {
		t.Fatal("not ready once the stops ended")
	}
	sent := s.BeginAt(now, stopChanges(20))
	if len(sent) != 20 {
		t.Fatalf("first report carries %d changes; want all 20 in one request", len(sent))
	}
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: ids(20)})

	// Bounded: stops that never end hold the first report at most maxGather.
	next := stop.Add(time.Minute)
	s.Assigned(next)
	s.Coming(true)
	late := next.Add(maxGather)
	for now = next.Add(300 * time.Millisecond); !s.Ready(now) || s.BeginAt(now, stopChanges(2)) == nil; now = s.NextAttempt() {
		if now.After(late) {
			t.Fatalf("the first report still waits %v after the burst began; want at most %v", now.Sub(next), maxGather)
		}
	}
}

// A fleet's first start of its tasks is where it meets the throttle, every agent at once, so an
// agent new to its control plane gathers its bursts' changes as if it had met a 429: the
// agents at the front, served from the throttle's burst with their first task's change, each
// took a turn for the rest in the queue the fleet learns its places from (bench fleet's start
// round at 200 agents: 20–25 follow-ups, the schedule learnt 1.3 s past the floor of 9 s), and,
// served at once, met no 429 and sent the storm's stop in two requests too. An agent that
// met no 429 in its first gatherBursts bursts reports at once from then on (a lone agent's
// latency), and a kept place with no 429 lately does not make a restarted agent new again.
func TestANewAgentGathersItsFirstBurstsAsIfThrottled(t *testing.T) {
	s := New(Policy{Seed: 6})
	at := t0
	for b := 1; b <= gatherBursts; b++ {
		if !stopBurstGathers(t, s, at, false) {
			t.Fatalf("burst %d of a new agent does not wait for its stops; want its first %d to", b, gatherBursts)
		}
		if p := s.Place(at); p.Learnt() {
			// Its window is not a 429's: kept, a restarted agent would take it for one.
			t.Fatalf("after burst %d an agent that never met a 429 keeps the place %v; want nothing learnt", b, p)
		}
		at = at.Add(time.Minute)
	}
	if stopBurstGathers(t, s, at, false) {
		t.Fatalf("an agent that met no 429 in its first %d bursts still waits for its stops; want it to report at once", gatherBursts)
	}

	restarted := New(Policy{Seed: 8})
	if err := restarted.Restore(Place{Slot: 100 * time.Millisecond, Served: 100 * time.Millisecond, Since429: -1, Kept: at}, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if stopBurstGathers(t, restarted, at.Add(2*time.Minute), false) {
		t.Fatal("an agent restarted with a place and no 429 lately waits for its stops as if new; want it to report at once")
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c-%d", i)
	}
	return out
}

// A hang's return is learnt by every agent held in it at one instant, when their requests are
// cut together, where a fleet probing a control plane that refuses it learns of the return
// over the poller's interval: 20 agents with no place learnt (slot 0), whose polls were held
// and cut at the same instant, report spread over returnSpread, not in one slot (bench
// fleet's hanging outage: 52–54 requests in the first second after the return, 19–22 after a
// refusal).
func TestAgentsHeldInAHangComeBackSpread(t *testing.T) {
	back := t0.Add(time.Minute)
	var at []time.Time
	for i := 0; i < 20; i++ {
		s := New(Policy{Seed: uint64(100 + i)})
		sent := back.Add(-3 * time.Second)
		out := s.BeginAt(sent, batch("c-1"))                                                        // held in the hang…
		s.Done(back, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")}) // …and cut at its return
		s.Hung(back.Add(250 * time.Millisecond))                                                    // the poll held beside it, cut too, asked again and answered
		s.Answered(back.Add(250*time.Millisecond), true)
		at = append(at, s.NextAttempt())
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if first, last := at[0].Sub(back), at[len(at)-1].Sub(back); last-first < returnSpread/2 || last > returnSpread+time.Second {
		t.Fatalf("20 agents held in a hang report from +%v to +%v after its return; want them spread over about %v", first, last, returnSpread)
	}
	busiest := 0
	for _, n := range slots(at, back, 100*time.Millisecond) {
		busiest = max(busiest, n)
	}
	if busiest > 5 {
		t.Fatalf("%d of 20 agents held in a hang report in one 100 ms slot after its return; want them spread", busiest)
	}
}

// attack31: a stretch belongs to the failure that made it. A hang cut every 5 s by a load
// balancer while the control plane stays away: the first two cut reports are placed at their
// slot stretched (maxPlaced), the third backs off about the longest backoff — and its stale
// stretch flag made the poll answered at the real return leave it there (15–45 s) instead of
// placing it at its slot from the return, as Answered did before herd4.
func TestAStaleStretchDoesNotKeepTheLongBackoffAfterTheReturn(t *testing.T) {
	s := New(Policy{Seed: 17})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.Pace()
	sent := t0.Add(time.Minute)
	var cut time.Time
	for i := 0; i < maxPlaced+1; i++ {
		out := s.BeginAt(sent, batch("c-9"))
		if out == nil {
			t.Fatalf("attempt %d: nothing sent at %v", i, sent)
		}
		cut = sent.Add(5 * time.Second) // held 5 s, cut by the balancer: the control plane is still away
		s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")})
		sent = s.NextAttempt()
	}
	back := cut.Add(time.Second)
	s.Answered(back, true) // the poller learns of the return
	if at, want := s.NextAttempt().Sub(back), slot*105/100+returnSpread; at > want {
		t.Fatalf("after the return the report waits %v; want its slot from the return, at most %v (slot %v)", at, want, slot)
	}
}

// An agent gathers a burst's changes only while it meets the throttle: once answered 429, it
// gathers in the next gatherBursts bursts however cleanly they go (a fleet pacing well meets
// no 429 for a while and still needs every agent's changes in one request), then reports at
// once again — an agent throttled once, or whose control plane stopped throttling, no longer
// holds every burst's first report for the rest of its life. A 429 in a later burst arms it
// again. (With "ever answered 429" as the rule, the burst after the ten gathers too.)
func TestGatheringLastsWhileTheAgentMeetsTheThrottle(t *testing.T) {
	s := New(Policy{Seed: 7})
	throttledBurst(t, s, t0, 100*time.Millisecond, 100*time.Millisecond) // slot ≈ 0.2 s
	stop := t0
	for b := 1; b <= gatherBursts; b++ {
		stop = stop.Add(time.Minute)
		if !stopBurstGathers(t, s, stop, false) {
			t.Fatalf("burst %d after the one that met a 429 does not gather; want %d bursts that do", b, gatherBursts)
		}
	}
	stop = stop.Add(time.Minute)
	if stopBurstGathers(t, s, stop, true) { // this burst meets a 429 again
		t.Fatalf("the first report of a burst %d bursts after the last 429 waits for the runtime's calls; want it sent at once", gatherBursts+1)
	}
	stop = stop.Add(time.Minute)
	if !stopBurstGathers(t, s, stop, false) {
		t.Fatal("the burst after one that met a 429 again does not gather")
	}
}

// stopBurstGathers plays a stop of ten tasks begun at stop, while the runtime's calls are still
// out: whether the first report waited for them (gathered); the reports settle, the first
// after a 429 when throttle.
func stopBurstGathers(t *testing.T, s *Submitter, stop time.Time, throttle bool) bool {
	t.Helper()
	s.Assigned(stop)
	s.Coming(true)
	now := stop.Add(300 * time.Millisecond) // past its slot: the first task stopped
	for !s.Ready(now) {
		now = s.NextAttempt()
	}
	sent := s.BeginAt(now, stopChanges(2))
	gathered := sent == nil
	if gathered {
		now = stop.Add(700 * time.Millisecond) // the last stop ended
		s.Coming(false)
		for !s.Ready(now) {
			now = s.NextAttempt()
		}
		if sent = s.BeginAt(now, stopChanges(20)); len(sent) != 20 {
			t.Fatalf("after gathering, the first report carries %d changes; want 20", len(sent))
		}
	}
	if throttle {
		s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 100 * time.Millisecond})
		now = s.NextAttempt()
		sent = s.BeginAt(now, stopChanges(len(sent)))
	}
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: ids(len(sent))})
	s.Coming(false)
	return gathered
}

// A control plane (or a proxy before it) that holds every long poll and cuts it without an
// answer, well within a long poll's wait, has the poller find it gone and back again every few
// seconds (a held poll cut, a probe answered: Hung, Answered with outage). A burst waiting for
// its slot is placed from the first such return; placed again from each, a slot longer than
// the cuts' interval never comes, and the burst's changes are never reported (each return
// pushed the report a whole slot on).
func TestPollsCutOverAndOverDoNotPushABurstOnForever(t *testing.T) {
	pollsCutOverAndOver(t, 31, "a burst", func(s *Submitter) time.Time {
		exited := t0.Add(time.Minute) // the host's containers exit: a burst waits for its slot
		if s.Ready(exited) {
			t.Fatal("the host's burst is reported at once, not at its slot")
		}
		return exited
	})
}

// So with a report that failed (its connection broken, the control plane answering polls): the
// first return places its retry at its slot, and the returns that follow every few seconds do
// not push it on again, or a slot longer than their interval never comes.
func TestPollsCutOverAndOverDoNotPushAFailedReportOnForever(t *testing.T) {
	pollsCutOverAndOver(t, 32, "a failed report", func(s *Submitter) time.Time {
		sent := t0.Add(time.Minute)
		for !s.Ready(sent) {
			sent = s.NextAttempt()
		}
		out := s.BeginAt(sent, batch("c-2"))
		failed := sent.Add(10 * time.Millisecond)
		s.Done(failed, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection reset")})
		return failed
	})
}

// pollsCutOverAndOver plays a report kept waiting (what) by an agent whose slot, learnt from a
// burst throttled for 12 s, is long: waiting sets it waiting and says since when. Then every
// 5 s the poller finds the control plane gone and back (a poll held 5 s cut, the probe after it
// answered), and the report must come at its own next attempt within two slots.
func pollsCutOverAndOver(t *testing.T, seed uint64, what string, waiting func(*Submitter) time.Time) {
	t.Helper()
	s := New(Policy{Seed: seed, ReturnSpread: time.Millisecond})
	throttledBurst(t, s, t0, 0, 12*time.Second)
	slot := s.Pace()
	since := waiting(s)
	deadline := since.Add(2*slot + 2*time.Second)
	for now := since.Add(5 * time.Second); now.Before(deadline); now = now.Add(5 * time.Second) {
		if at := s.NextAttempt(); !at.After(now) {
			if !s.Ready(at) {
				t.Fatalf("%s is not ready at its own next attempt %v after it began waiting", what, at.Sub(since))
			}
			return
		}
		s.Hung(now)
		s.Answered(now, true)
	}
	t.Fatalf("%s (slot %v), its polls cut every 5 s, is still waiting %v after it began (next attempt %v after)", what, slot, deadline.Sub(since), s.NextAttempt().Sub(since))
}
