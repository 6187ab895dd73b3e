package submit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// TestScripts plays the submitter's stories in testdata/ (rewrite expectations with -rewrite).
// Each command is an event handed to the real submitter (Step) on a virtual clock, and its
// output is the plan, as data; the script says what each report sent came to. Times print
// from the script's start (t+…).
//
//	submitter [seed=N] [max=D] [poll-wait=D] [naive]  a new submitter at t+0 (seed 1 unless given)
//	changes ID[@TASK] ...                 changes join the outbox (task: task/ID unless given)
//	tick D | until D                      time passes by D / to t+D
//	next                                  time passes to the last plan's At
//	report [coming]                       offer a report (Step(Report)); coming: changes still being made
//	answer settled [reject=ID,..]         the answer to the report in flight, arriving now
//	       429 [retry-after=D] [arrived=-D]  (arrived: it reached the host D before now)
//	       refused | cut | 500 | 401 | 400 | 413
//	poll [outage] [held] [payloads] [arrived=-D]  a poll answered (Step(Polled))
//	restart slot=D served=D [depth=D] since429=N kept=-D  the place the journal kept (Step(Restart))
//	stop                                  a clean stop (Step(Stop)): the place kept
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := &script{}
		datadriven.RunTest(t, path, s.do)
	})
}

type script struct {
	sub    *Submitter
	now    time.Time
	outbox []fsm.Change
	sent   []protocol.StateChange // the report in flight
	last   Plan
	window time.Duration // the retry window after the last step (retry.go), printed when it moves
}

func (s *script) do(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "submitter":
		p := Policy{Seed: 1}
		d.MaybeScanArgs(t, "seed", &p.Seed)
		if d.HasArg("max") {
			p.Max = s.duration(t, d, "max")
		}
		if d.HasArg("poll-wait") {
			p.PollWait = s.duration(t, d, "poll-wait")
		}
		p.Naive = d.HasArg("naive")
		*s = script{sub: New(p), now: t0}
		return "ok\n"
	case "changes":
		for _, a := range d.CmdArgs {
			id, task, ok := strings.Cut(a.Key, "@")
			if !ok {
				task = "task/" + id
			}
			s.outbox = append(s.outbox, fsm.Change{ID: id, Task: task, Status: event.StatusStopped, At: s.now})
		}
		return fmt.Sprintf("%d unsent\n", len(s.outbox))
	case "tick":
		s.now = s.now.Add(mustDuration(t, d.CmdArgs[0].Key))
		return s.at(s.now) + "\n"
	case "until":
		s.now = t0.Add(mustDuration(t, d.CmdArgs[0].Key))
		return s.at(s.now) + "\n"
	case "next":
		if s.last.At.After(s.now) {
			s.now = s.last.At
		}
		return s.at(s.now) + "\n"
	case "report":
		return s.step(Report{Outbox: outbox(s.outbox), Coming: d.HasArg("coming")})
	case "answer":
		return s.answer(t, d)
	case "poll":
		ev := Polled{Outage: d.HasArg("outage"), Held: d.HasArg("held"), Payloads: d.HasArg("payloads")}
		if d.HasArg("arrived") {
			ev.ReceivedAt = s.now.Add(s.duration(t, d, "arrived"))
		}
		return s.step(ev)
	case "restart":
		p := Place{Slot: s.duration(t, d, "slot"), Served: s.duration(t, d, "served"), Kept: s.now.Add(s.duration(t, d, "kept"))}
		d.ScanArgs(t, "since429", &p.Since429)
		if d.HasArg("depth") {
			p.Depth = s.duration(t, d, "depth")
		}
		return s.step(Restart{Place: p})
	case "stop":
		return s.step(Stop{})
	}
	d.Fatalf(t, "unknown command %q", d.Cmd)
	return ""
}

// answer hands the submitter the answer to the report in flight, and settles what it settles.
func (s *script) answer(t *testing.T, d *datadriven.TestData) string {
	if s.sent == nil {
		return "no report in flight\n"
	}
	var r protocol.ReportResult
	switch kind := d.CmdArgs[0].Key; kind {
	case "settled":
		r.Outcome = protocol.Settled
		rejected := map[string]bool{}
		if d.HasArg("reject") {
			for _, a := range d.CmdArgs {
				if a.Key == "reject" {
					for _, id := range a.Vals {
						rejected[id] = true
						r.Rejected = append(r.Rejected, protocol.Rejection{ID: id, Error: "unknown_task"})
					}
				}
			}
		}
		for _, c := range s.sent {
			if !rejected[c.ID] {
				r.Accepted = append(r.Accepted, c.ID)
			}
		}
	case "429":
		r = protocol.ReportResult{Outcome: protocol.Throttled, HTTPStatus: 429, Err: errors.New("HTTP 429")}
		if d.HasArg("retry-after") {
			r.RetryAfter = s.duration(t, d, "retry-after")
		}
		if d.HasArg("arrived") {
			r.ReceivedAt = s.now.Add(s.duration(t, d, "arrived"))
		}
	case "refused":
		r = protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("connection refused")}
	case "cut":
		r = protocol.ReportResult{Outcome: protocol.Network, Err: errors.New("EOF")}
	case "500":
		r = protocol.ReportResult{Outcome: protocol.ServerError, HTTPStatus: 500, Err: errors.New("HTTP 500")}
	case "401":
		r = protocol.ReportResult{Outcome: protocol.Unauthorized, HTTPStatus: 401, Err: errors.New("HTTP 401")}
	case "400":
		r = protocol.ReportResult{Outcome: protocol.BadRequest, HTTPStatus: 400, Err: errors.New("HTTP 400")}
	case "413":
		r = protocol.ReportResult{Outcome: protocol.TooLarge, HTTPStatus: 413, Err: errors.New("HTTP 413")}
	default:
		d.Fatalf(t, "answer %q: want settled, 429, refused, cut, 500, 401, 400 or 413", kind)
	}
	sent := s.sent
	s.sent = nil
	out := s.step(Answer{Sent: sent, Result: r})
	if st := s.last.Settled; st != nil {
		done := map[string]bool{}
		for _, id := range st.Accepted {
			done[id] = true
		}
		for _, rj := range st.Rejected {
			done[rj.ID] = true
		}
		kept := s.outbox[:0]
		for _, c := range s.outbox {
			if !done[c.ID] {
				kept = append(kept, c)
			}
		}
		s.outbox = kept
	}
	return out
}

// step hands the submitter ev now and prints the plan: what it sends, when it may send again
// (with the wait from now), and whatever else it says.
func (s *script) step(ev Event) string {
	p := s.sub.Step(s.now, ev)
	pace, window := s.last.Status.Pace, s.window
	s.last, s.window = p, s.sub.retry.window
	var b strings.Builder
	if p.Send != nil {
		s.sent = p.Send
		ids := make([]string, len(p.Send))
		for i, c := range p.Send {
			ids[i] = c.ID
		}
		fmt.Fprintf(&b, "send %s\n", strings.Join(ids, " "))
	}
	if p.Repoll {
		b.WriteString("repoll\n")
	}
	if st := p.Settled; st != nil {
		fmt.Fprintf(&b, "settled %d accepted, %d rejected\n", len(st.Accepted), len(st.Rejected))
	}
	if a := p.Attempt; a != nil {
		fmt.Fprintf(&b, "journal attempt %s count=%d\n", a.Outcome, a.Count)
	}
	if p.Log != "" {
		fmt.Fprintf(&b, "log %s\n", p.Log)
	}
	if !p.At.IsZero() && p.At.After(s.now) {
		fmt.Fprintf(&b, "next %s (in %v)\n", s.at(p.At), p.At.Sub(s.now).Round(time.Millisecond))
	}
	if p.Health != "" {
		fmt.Fprintf(&b, "health %s (credentials %v)\n", p.Health, p.Credentials)
	}
	if p.Status.Pace != pace {
		fmt.Fprintf(&b, "slot %v\n", p.Status.Pace.Round(time.Millisecond))
	}
	if s.window != window {
		fmt.Fprintf(&b, "retry window %v\n", s.window.Round(time.Millisecond))
	}
	if p.Refused != nil {
		fmt.Fprintf(&b, "refused %v\n", p.Refused)
	}
	if _, ok := ev.(Stop); ok {
		fmt.Fprintf(&b, "keep slot=%v served=%v depth=%v since429=%d\n", p.Keep.Slot.Round(time.Millisecond), p.Keep.Served.Round(time.Millisecond), p.Keep.Depth.Round(time.Millisecond), p.Keep.Since429)
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

// at prints a time from the script's start.
func (s *script) at(t time.Time) string { return "t+" + t.Sub(t0).Round(time.Millisecond).String() }

func (s *script) duration(t *testing.T, d *datadriven.TestData, key string) time.Duration {
	var v string
	d.ScanArgs(t, key, &v)
	return mustDuration(t, v)
}

func mustDuration(t *testing.T, v string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("duration %q: %v", v, err)
	}
	return d
}
