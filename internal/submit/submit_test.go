package submit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func batch(ids ...string) []fsm.Change {
	out := make([]fsm.Change, len(ids))
	for i, id := range ids {
		out[i] = fsm.Change{ID: id, Task: "task/a", Status: event.StatusRunning, At: t0}
	}
	return out
}

// offer hands s a report offer now, pending its outbox.
func offer(s *Submitter, now time.Time, pending []fsm.Change) Plan {
	return s.Step(now, Report{Outbox: outbox(pending)})
}

// Each kind of answer settles what it settles, sets its wait, and says its health.
func TestAnswersAndWaits(t *testing.T) {
	cases := []struct {
		name      string
		result    protocol.ReportResult
		minWait   time.Duration
		maxWait   time.Duration
		settled   int
		health    string
		journaled bool
	}{
		{"200 settles what was sent", protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}, Rejected: []protocol.Rejection{{ID: "c-2", Error: "unknown_task"}}}, 0, 0, 2, "", false},
		{"200 listing ids never sent settles only what was sent", protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1", "c-99"}}, 0, 0, 1, "", false},
		{"200 settling nothing backs off", protocol.ReportResult{Outcome: protocol.Settled}, 50 * time.Millisecond, 150 * time.Millisecond, 0, "", true},
		{"429 waits Retry-After, then a random point of one pace", protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 3 * time.Second}, 3 * time.Second, 6 * time.Second, 0, "", true},
		{"429 without Retry-After waits a random point of the first pace", protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429}, 0, 100 * time.Millisecond, 0, "", true},
		{"5xx backs off", protocol.ReportResult{Outcome: protocol.ServerError, HTTPStatus: 503, Err: errors.New("HTTP 503")}, 50 * time.Millisecond, 150 * time.Millisecond, 0, "", true},
		{"401 retries slowly and is unhealthy", protocol.ReportResult{Outcome: protocol.Unauthorized, HTTPStatus: 401, Err: errors.New("refused")}, 30 * time.Second, 30 * time.Second, 0, "credentials", true},
		{"400 of two changes splits them, retried soon", protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: errors.New("bad")}, 100 * time.Millisecond, 100 * time.Millisecond, 0, "", true},
		{"413 of two changes splits them, retried soon", protocol.ReportResult{Outcome: protocol.TooLarge, HTTPStatus: 413, Err: errors.New("large")}, 100 * time.Millisecond, 100 * time.Millisecond, 0, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Policy{Seed: 1})
			sent := offer(s, t0, batch("c-1", "c-2")).Send
			if sent == nil {
				t.Fatal("a new submitter sends nothing")
			}
			if again := offer(s, t0, batch("c-1", "c-2")); again.Send != nil {
				t.Fatal("a second report while one is in flight: two reports at once could reorder a task's changes")
			}
			o := s.Step(t0, Answer{Sent: sent, Result: tc.result})
			n := 0
			if o.Settled != nil {
				n = len(o.Settled.Accepted) + len(o.Settled.Rejected)
			}
			if n != tc.settled {
				t.Fatalf("settled %d; want %d", n, tc.settled)
			}
			wait := o.At.Sub(t0)
			if tc.settled > 0 {
				wait = 0
				if offer(s, t0, batch("c-3")).Send == nil {
					t.Fatal("nothing sent right after a settling answer")
				}
			}
			if wait < tc.minWait || wait > tc.maxWait {
				t.Fatalf("waits %v; want %v..%v", wait, tc.minWait, tc.maxWait)
			}
			if h := o.Health; !strings.Contains(h, tc.health) || (tc.health == "" && h != "") {
				t.Fatalf("health %q; want it to mention %q", h, tc.health)
			}
			if (o.Attempt != nil) != tc.journaled {
				t.Fatalf("report_attempted journaled: %v; want %v", o.Attempt != nil, tc.journaled)
			}
		})
	}
}

// sendWhenDue offers pending from now on, at each plan's At, until a report goes: it returns
// the report and when it went.
func sendWhenDue(t *testing.T, s *Submitter, now time.Time, pending []fsm.Change) ([]protocol.StateChange, time.Time) {
	t.Helper()
	for range 100 {
		p := offer(s, now, pending)
		if p.Send != nil {
			return p.Send, now
		}
		if !p.At.After(now) {
			t.Fatalf("nothing sent at %v and nothing due later (At %v)", now.Sub(t0), p.At.Sub(t0))
		}
		now = p.At
	}
	t.Fatalf("nothing sent in 100 offers from %v", now.Sub(t0))
	return nil, now
}

// throttledBurst plays one burst begun by payloads at start: the first change is ready at
// start+lag, its report is answered 429 with a Retry-After of ra, and the retry is served.
// It returns when the retry was served.
func throttledBurst(t *testing.T, s *Submitter, start time.Time, lag, ra time.Duration) time.Time {
	t.Helper()
	s.Step(start, Polled{Payloads: true, ReceivedAt: start})
	sent, now := sendWhenDue(t, s, start.Add(lag), batch("c-1"))
	p := s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: ra}})
	sent, now = sendWhenDue(t, s, p.At, batch("c-1"))
	s.Step(now, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}}})
	return now
}

// refused answers sent: nothing listens (or the connection broke: err).
func refused(err string) protocol.ReportResult {
	return protocol.ReportResult{Outcome: protocol.Network, Err: errors.New(err)}
}
