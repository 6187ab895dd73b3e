package submit

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

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
	s.Step(stop, Polled{Payloads: true, ReceivedAt: stop})
	now := stop.Add(300 * time.Millisecond) // past its slot (≈ 0.2 s): the first task stopped
	sent := s.Step(now, Report{Outbox: outbox(stopChanges(2)), Coming: true}).Send
	gathered := sent == nil
	if gathered {
		// The last stop ended.
		if sent, now = sendWhenDue(t, s, stop.Add(700*time.Millisecond), stopChanges(20)); len(sent) != 20 {
			t.Fatalf("after gathering, the first report carries %d changes; want 20", len(sent))
		}
	}
	if throttle {
		p := s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 100 * time.Millisecond}})
		sent, now = sendWhenDue(t, s, p.At, stopChanges(len(sent)))
	}
	s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Settled, Accepted: ids(len(sent))}})
	return gathered
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

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("c-%d", i)
	}
	return out
}
