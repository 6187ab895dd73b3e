package submit

import (
	"testing"
	"time"

	"github.com/agentd/agentd/internal/protocol"
)

// A new agent served at once 800 ms into its first burst keeps that as its place: its next
// bursts' first reports wait for it (a fleet started together comes back in the order the
// throttle served it). A place no 429 proves goes with the new agent's window: from the
// gatherBursts+1-th burst on, an agent whose control plane never throttled it reports at once
// (a lone agent's price is its first burst's delay on the bursts between). A place a 429 taught
// stays, and only such a place is kept across a restart. (Without the rule the second burst goes
// at once; without its end, the eleventh waits.)
func TestANewAgentsFirstServedTimeIsItsPlaceUntilItsWindowEnds(t *testing.T) {
	const delay = 800 * time.Millisecond
	// burst plays a burst begun by payloads at start whose change is ready after ready, and
	// answers its report; it returns how long after the change was ready the report went.
	burst := func(s *Submitter, start time.Time, ready time.Duration, throttle bool) time.Duration {
		s.Step(start, Polled{Payloads: true, ReceivedAt: start})
		sent, now := sendWhenDue(t, s, start.Add(ready), batch("c-1"))
		held := now.Sub(start.Add(ready))
		if throttle {
			p := s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: time.Second}})
			sent, now = sendWhenDue(t, s, p.At, batch("c-1"))
		}
		s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}}})
		return held
	}
	s := New(Policy{Seed: 3})
	start := t0
	if held := burst(s, start, delay, false); held != 0 {
		t.Fatalf("a new agent's first report held %v; want it sent when ready", held)
	}
	if s.slot.at != delay {
		t.Fatalf("served at once %v into its first burst, the new agent's slot is %v; want %v", delay, s.slot.at, delay)
	}
	// Restarted, it is new again: a place kept would be restored as proved, held for good.
	if p := s.Step(start.Add(time.Second), Stop{}).Keep; p.Learnt() {
		t.Fatalf("a new agent keeps the place %v at a clean stop; want none (no 429 proved it)", p)
	}
	for b := 2; b <= gatherBursts; b++ {
		start = start.Add(time.Minute)
		if held := burst(s, start, 0, false); held < delay/2 {
			t.Fatalf("burst %d, its change ready at once: its report went %v after; want it held for the place (about %v)", b, held, delay)
		}
	}
	start = start.Add(time.Minute)
	if held := burst(s, start, 0, false); held != 0 {
		t.Fatalf("burst %d with no 429 ever: its report held %v; want it sent at once (the place unproved goes)", gatherBursts+1, held)
	}

	// A new agent that meets a 429 in its window keeps a place past it.
	s, start = New(Policy{Seed: 3}), t0
	burst(s, start, delay, false)
	burst(s, start.Add(time.Minute), 0, true)
	for b := 3; b <= gatherBursts+3; b++ {
		start = start.Add(time.Minute)
		burst(s, start.Add(time.Minute), 0, false)
	}
	if s.slot.at == 0 {
		t.Fatalf("%d bursts on, the place a 429 taught in the second is gone", gatherBursts+1)
	}
}
