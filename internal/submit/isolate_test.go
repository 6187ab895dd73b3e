package submit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// drive runs the submitter as the engine does, on a virtual clock, against answer (a control
// plane), until every change but the ones in never has settled or the budget of reports is
// spent. It returns the reports sent, the virtual time it took, and the last answer's plan.
func drive(t *testing.T, s *Submitter, pending []fsm.Change, answer func([]protocol.StateChange, []byte) protocol.ReportResult, budget int) ([][]protocol.StateChange, time.Duration, Plan) {
	t.Helper()
	now := t0
	var sent [][]protocol.StateChange
	var last Plan
	for len(sent) < budget && len(pending) > 0 {
		out := offer(s, now, pending)
		if out.Send == nil {
			if !out.At.After(now) {
				t.Fatalf("nothing sent and the plan's At %v is not after now %v: the engine would spin", out.At, now)
			}
			now = out.At
			continue
		}
		body, _ := json.Marshal(protocol.StateChangesRequest{Changes: out.Send})
		sent = append(sent, out.Send)
		o := s.Step(now, Answer{Sent: out.Send, Result: answer(out.Send, body)})
		last = o
		if o.Settled != nil {
			done := map[string]bool{}
			for _, id := range o.Settled.Accepted {
				done[id] = true
			}
			for _, rj := range o.Settled.Rejected {
				done[rj.ID] = true
			}
			var rest []fsm.Change
			for _, c := range pending {
				if !done[c.ID] {
					rest = append(rest, c)
				}
			}
			pending = rest
		}
		if n := o.At; n.After(now) {
			now = n
		} else {
			now = now.Add(time.Millisecond)
		}
	}
	return sent, now.Sub(t0), last
}

func changes(tasks, each int) []fsm.Change {
	var out []fsm.Change
	for i := 0; i < each; i++ {
		for k := 0; k < tasks; k++ {
			out = append(out, fsm.Change{ID: fmt.Sprintf("c-%d-%d", k, i), Task: fmt.Sprintf("task/%d", k), Container: "app",
				Status: []event.Status{event.StatusPulled, event.StatusCreated, event.StatusRunning, event.StatusStopped}[i%4], At: t0})
		}
	}
	return out
}

func acceptAll(out []protocol.StateChange) protocol.ReportResult {
	r := protocol.ReportResult{Outcome: protocol.Settled, HTTPStatus: 200}
	for _, c := range out {
		r.Accepted = append(r.Accepted, c.ID)
	}
	return r
}

// A change the control plane always refuses (400) is isolated and retried alone, slowly,
// while every other task's changes settle; its own task's later changes wait behind it. Before,
// a 400 kept the whole batch and nothing was ever reported again.
func TestRefusedChangeIsIsolatedWhileTheRestFlow(t *testing.T) {
	s := New(Policy{Seed: 3})
	pending := changes(50, 5) // 250 changes, task/k's in order
	const poison = "c-7-1"    // task/7's second change
	var poisonSends []int
	answer := func(out []protocol.StateChange, _ []byte) protocol.ReportResult {
		for _, c := range out {
			if c.ID == poison {
				return protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: fmt.Errorf("changes[x]: malformed")}
			}
		}
		return acceptAll(out)
	}
	var settled []string
	reports, allBy := 0, 0
	wrapped := func(out []protocol.StateChange, b []byte) protocol.ReportResult {
		r := answer(out, b)
		settled = append(settled, r.Accepted...)
		reports++
		if len(settled) == 250-4 && allBy == 0 {
			allBy = reports
		}
		return r
	}
	sent, took, last := drive(t, s, pending, wrapped, 60)
	for i, r := range sent {
		withPoison := false
		for _, c := range r {
			if c.ID == poison {
				withPoison = true
				poisonSends = append(poisonSends, i)
				if len(r) != 1 && len(poisonSends) > 1 && len(sent[poisonSends[len(poisonSends)-2]]) == 1 {
					t.Errorf("report %d carries the refused change with %d others after it was isolated", i, len(r)-1)
				}
			}
			if c.TaskARN == "task/7" && c.ID > poison && !withPoison {
				t.Fatalf("report %d sends %s of task/7 without its refused earlier change: per-task order broken", i, c.ID)
			}
		}
	}
	want := 250 - 4 // all but the poison and task/7's three later changes
	if len(settled) != want {
		t.Fatalf("%d changes settled in %d reports (%v); want %d: a refused change stalls the others", len(settled), len(sent), took, want)
	}
	t.Logf("%d reports in %v of virtual time; the refused change was in reports %v", len(sent), took, poisonSends)
	if allBy == 0 || allBy > 25 {
		t.Fatalf("the other changes settled only by report %d; want within 25 (3 reports' worth plus a bisection)", allBy)
	}
	if held := heldIDs(s); len(held) != 1 || held[0] != poison {
		t.Fatalf("held %v; want just %s", held, poison)
	}
	if h, cred := last.Health, last.Credentials; cred || !strings.Contains(h, poison) || !strings.Contains(h, "task/7") {
		t.Fatalf("health %q: a held change must make reporting unhealthy, naming it", h)
	}
	// Retried alone, with growing waits.
	s2 := New(Policy{Seed: 3})
	lone := []fsm.Change{{ID: poison, Task: "task/7", Status: event.StatusRunning, At: t0}}
	var times []time.Time
	now := t0
	for i := 0; i < 4; i++ {
		out := offer(s2, now, lone)
		if out.Send == nil {
			now = out.At
			i--
			continue
		}
		times = append(times, now)
		s2.Step(now, Answer{Sent: out.Send, Result: protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: fmt.Errorf("no")}})
	}
	for i := 1; i < len(times); i++ {
		gap := times[i].Sub(times[i-1])
		if gap < 15*time.Second || gap > MaxHeldWait*3/2 {
			t.Fatalf("lone retry %d after %v; want a slow retry (≥ 15 s, ≤ %v)", i, gap, MaxHeldWait*3/2)
		}
	}
	if times[3].Sub(times[2]) <= times[1].Sub(times[0]) {
		t.Fatalf("lone retries do not slow down: %v", times)
	}
}

// A report the control plane refuses as too large (413) is split until its parts pass; every
// change settles. The control plane here allows 64 KB, stricter than the protocol's 1 MiB (a
// proxy in front of it, say), so the agent's own cap does not already avoid the 413.
func TestTooLargeReportIsSplit(t *testing.T) {
	s := New(Policy{Seed: 4})
	pending := changes(100, 1)
	for i := range pending {
		pending[i].Reason = strings.Repeat("r", 1000)
	}
	tooLarge := 0
	answer := func(out []protocol.StateChange, body []byte) protocol.ReportResult {
		if len(body) > 64<<10 {
			tooLarge++
			return protocol.ReportResult{Outcome: protocol.TooLarge, HTTPStatus: 413, Err: fmt.Errorf("413")}
		}
		return acceptAll(out)
	}
	sent, _, _ := drive(t, s, pending, answer, 30)
	n := 0
	for _, r := range sent {
		n += len(r)
	}
	if heldIDs(s) != nil && len(heldIDs(s)) > 0 {
		t.Fatalf("held %v after 413s: a too-large batch is split, not held", heldIDs(s))
	}
	if tooLarge == 0 || len(sent) >= 30 {
		t.Fatalf("%d reports, %d answered 413; want a few 413s, then every change settled", len(sent), tooLarge)
	}
}

// Whatever the journal holds (a 3.5 MB reason journaled before the limit, 40 KB ARNs from
// before the ARN rule), a report stays within 1 MiB and each reason within 1 KiB.
func TestReportsStayWithinTheProtocolsLimits(t *testing.T) {
	s := New(Policy{Seed: 5})
	var cands []fsm.Change
	for i := 0; i < 100; i++ {
		cands = append(cands, fsm.Change{ID: fmt.Sprintf("c-%d", i), Task: "task/" + strings.Repeat("a", 40<<10) + fmt.Sprint(i),
			Status: event.StatusStopped, At: t0})
	}
	for i := 0; i < 3; i++ {
		cands[i].Reason = strings.Repeat(`"\`, 1750<<10)
	}
	out := offer(s, t0, cands).Send
	if len(out) == 0 || len(out) == 100 {
		t.Fatalf("%d changes in the report; want some, cut by size", len(out))
	}
	body, _ := json.Marshal(protocol.StateChangesRequest{Changes: out})
	if len(body) > protocol.MaxRequestBody {
		t.Fatalf("report body %d bytes; at most %d", len(body), protocol.MaxRequestBody)
	}
	for _, c := range out {
		if len(c.Reason) > protocol.MaxReasonBytes {
			t.Fatalf("reason of %d bytes", len(c.Reason))
		}
	}
}

// When every candidate is held, nothing is sent and nothing is in flight, so the next report
// is not blocked behind one that is never sent, and the plan's At wakes the engine for it.
func TestAllCandidatesHeldBeginsNothing(t *testing.T) {
	s := New(Policy{Seed: 6})
	lone := []fsm.Change{{ID: "c-p", Task: "task/p", Status: event.StatusRunning, At: t0}}
	sent := offer(s, t0, lone).Send
	if sent == nil {
		t.Fatal("nothing sent")
	}
	s.Step(t0, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: fmt.Errorf("no")}})
	now := t0.Add(time.Millisecond)
	p := offer(s, now, lone)
	if p.Send != nil || p.Status.InFlight {
		t.Fatalf("sent %v (in flight %v) while it is held", p.Send, p.Status.InFlight)
	}
	if !p.At.After(now) {
		t.Fatalf("At %v: the engine would not wake for the held change", p.At)
	}
	other := append(lone, fsm.Change{ID: "c-o", Task: "task/o", Status: event.StatusRunning, At: t0})
	if sent = offer(s, now, other).Send; len(sent) != 1 || sent[0].ID != "c-o" {
		t.Fatalf("sent %v; want the other task's change", sent)
	}
}

// A held change that the control plane later settles is forgotten, and reporting is healthy
// again.
func TestHeldChangeThatSettlesIsReleased(t *testing.T) {
	s := New(Policy{Seed: 8})
	lone := []fsm.Change{{ID: "c-p", Task: "task/p", Status: event.StatusRunning, At: t0}}
	sent := offer(s, t0, lone).Send
	if p := s.Step(t0, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: fmt.Errorf("no")}}); p.Health == "" {
		t.Fatal("healthy while a change is held")
	}
	p := offer(s, t0, lone)
	if p.Send != nil {
		t.Fatalf("sent %v at once", p.Send)
	}
	later := p.At // when it is due
	if sent = offer(s, later, lone).Send; len(sent) != 1 {
		t.Fatalf("the held change is not retried when due: %v", sent)
	}
	if p := s.Step(later, Answer{Sent: sent, Result: protocol.ReportResult{Outcome: protocol.Settled, HTTPStatus: 200, Accepted: []string{"c-p"}}}); p.Health != "" || len(heldIDs(s)) != 0 {
		t.Fatalf("after it settled: health %q, held %v", p.Health, heldIDs(s))
	}
}

// heldIDs is the ids of the changes held after the control plane refused each alone.
func heldIDs(s *Submitter) []string {
	out := make([]string, 0, len(s.isolate.held))
	for id := range s.isolate.held {
		out = append(out, id)
	}
	return out
}
