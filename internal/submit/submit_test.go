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
			if !s.Ready(t0) {
				t.Fatal("a new submitter is not ready")
			}
			sent := s.BeginAt(t0, batch("c-1", "c-2"))
			if s.Ready(t0) {
				t.Fatal("ready while a report is in flight: two reports at once could reorder a task's changes")
			}
			o := s.Done(t0, sent, tc.result)
			n := 0
			if o.Settled != nil {
				n = len(o.Settled.Accepted) + len(o.Settled.Rejected)
			}
			if n != tc.settled {
				t.Fatalf("settled %d; want %d", n, tc.settled)
			}
			wait := s.NextAttempt().Sub(t0)
			if tc.settled > 0 {
				wait = 0
				if !s.Ready(t0) {
					t.Fatal("not ready right after a settling answer")
				}
			}
			if wait < tc.minWait || wait > tc.maxWait {
				t.Fatalf("waits %v; want %v..%v", wait, tc.minWait, tc.maxWait)
			}
			if h, _ := s.Health(); !strings.Contains(h, tc.health) || (tc.health == "" && h != "") {
				t.Fatalf("health %q; want it to mention %q", h, tc.health)
			}
			if (o.Attempt != nil) != tc.journaled {
				t.Fatalf("report_attempted journaled: %v; want %v", o.Attempt != nil, tc.journaled)
			}
		})
	}
}

// While throttling lasts the waits grow, stay bounded, and never undercut Retry-After; the
// first success resets them. Attempts are folded into few journal records and one log line.
func TestThrottlingBacksOffBoundedAndLogsOnce(t *testing.T) {
	s := New(Policy{Seed: 7, Max: 10 * time.Second})
	now := t0
	var waits, windows []time.Duration
	logs, journaled := 0, 0
	for i := 0; i < 40; i++ {
		sent := s.BeginAt(now, batch("c-1"))
		o := s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, RetryAfter: 200 * time.Millisecond})
		w := s.NextAttempt().Sub(now)
		if w < 200*time.Millisecond {
			t.Fatalf("attempt %d waits %v, less than Retry-After", i, w)
		}
		if w > 15*time.Second {
			t.Fatalf("attempt %d waits %v, beyond Max × 1.5", i, w)
		}
		waits, windows = append(waits, w), append(windows, s.RetryWindow())
		if o.Log != "" {
			logs++
		}
		if o.Attempt != nil {
			journaled++
		}
		now = s.NextAttempt()
	}
	// Each wait is a random point of a window that grows while the 429s repeat.
	if windows[10] < 2*windows[1] {
		t.Fatalf("the retry window does not grow while throttled: %v (waits %v)", windows[:12], waits[:12])
	}
	if logs != 1 {
		t.Fatalf("%d log lines for one throttling streak; want 1", logs)
	}
	if journaled < 2 || journaled > 15 {
		t.Fatalf("%d report_attempted records for 40 attempts over %v; want them folded", journaled, now.Sub(t0))
	}
	sent := s.BeginAt(t0, batch("c-1"))
	o := s.Done(now, sent, protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
	if o.Log == "" || !strings.Contains(o.Log, "40 failed attempts") {
		t.Fatalf("recovery log %q; want it to count the 40 attempts", o.Log)
	}
	sent = s.BeginAt(t0, batch("c-2"))
	s.Done(now, sent, protocol.ReportResult{Outcome: protocol.ServerError, Err: errors.New("x")})
	if w := s.NextAttempt().Sub(now); w > 150*time.Millisecond {
		t.Fatalf("backoff not reset by a success: %v", w)
	}
}

// A burst this host began (its containers exited after a quiet spell) whose first report
// waits for the agent's slot asks the poller, once, to poll afresh (Repoll): a long poll begun
// before a hanging outage is answered as ever after it, and the agent, its report due only
// after the return, would never learn of the hang. A burst a poll's payloads began does not ask
// (that poll's successor is fresh), nor one whose report goes at once (the report is the probe).
// A report of such a burst held in a hang and cut goes at its plain slot: the fleet's agents
// polled afresh too and learn of the return with it, so none is left unaware to make room for.
func TestABurstTheHostBeganPollsAfresh(t *testing.T) {
	s := New(Policy{Seed: 21, ReturnSpread: time.Millisecond})
	if s.Ready(t0); s.Repoll() {
		t.Fatal("a first report going at once (no slot learnt) asks for a fresh poll")
	}
	s.Done(t0, s.BeginAt(t0, batch("c-0")), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-0"}})
	throttledBurst(t, s, t0.Add(time.Minute), 0, 4*time.Second)

	stop := t0.Add(2 * time.Minute)
	s.Assigned(stop) // the control plane stopped the tasks: the poll that brought it is over
	if s.Ready(stop.Add(300 * time.Millisecond)) {
		t.Fatal("the control plane's stop is reported at once, not at the slot")
	}
	if s.Repoll() {
		t.Fatal("a burst a poll's payloads began asks for a fresh poll")
	}
	now := s.NextAttempt()
	s.Done(now, s.BeginAt(now, batch("c-1")), protocol.ReportResult{Outcome: protocol.Settled, Accepted: []string{"c-1"}})
	slot := now.Sub(stop) // where the throttle last served it, which a return replays

	exited := t0.Add(3 * time.Minute) // the host's containers exit: nothing the control plane sent
	if s.Ready(exited) {
		t.Fatal("the host's burst is reported at once, not at the slot")
	}
	if !s.Repoll() {
		t.Fatal("a burst this host began, waiting for its slot, asks for no fresh poll")
	}
	if s.Ready(exited.Add(time.Second)); s.Repoll() {
		t.Fatal("a burst asks for a fresh poll twice")
	}
	sent := s.NextAttempt()
	if !s.Ready(sent) {
		t.Fatalf("the host's burst is not ready at its slot (%v)", sent.Sub(exited))
	}
	out := s.BeginAt(sent, batch("c-2"))
	cut := sent.Add(3 * time.Second) // held in a hang shorter than a long poll, cut at its return
	s.Done(cut, out, protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")})
	if at := s.NextAttempt().Sub(cut); at < slot || at > slot*105/100+time.Millisecond {
		t.Fatalf("a report of a burst that polled afresh, held 3 s and cut, retries %v later; want where the throttle last served it, %v (+5%%), unstretched", at, slot)
	}
}
