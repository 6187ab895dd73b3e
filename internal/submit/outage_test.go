package submit

import (
	"slices"
	"testing"
	"time"
)

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
		sent, now := sendWhenDue(t, s, t0.Add(time.Minute), batch("c-9"))
		s.Step(now, Answer{Sent: sent, Result: refused("connection refused")})
		p := s.Step(back, Polled{Outage: true})
		firsts = append(firsts, max(p.At.Sub(back), 0)) // a retry due before the return goes at it
	}
	busiest := 0
	for _, n := range slots(durationsFrom(back, firsts), back, time.Second) {
		busiest = max(busiest, n)
	}
	if spread := slices.Max(firsts) - slices.Min(firsts); spread < 9*time.Second || busiest > 3 {
		t.Fatalf("20 agents back from an outage send their first reports within %v, up to %d in one second (%v); want them over the fleet's ~10 s", spread, busiest, firsts)
	}
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
		sent := offer(s, back.Add(-3*time.Second), batch("c-1")).Send // held in the hang…
		s.Step(back, Answer{Sent: sent, Result: refused("EOF")})      // …and cut at its return
		// The poll held beside it, cut too, asked again and answered.
		at = append(at, s.Step(back.Add(250*time.Millisecond), Polled{Outage: true, Held: true}).At)
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

// A stretch belongs to the failure that made it. A hang cut every 5 s by a load balancer while
// the control plane stays away: the first two cut reports are placed at their slot stretched
// (maxPlaced), the third backs off about the longest backoff — and a stale stretch flag would
// have the poll answered at the real return leave it there (15–45 s) instead of placing it at
// its slot from the return.
func TestAStaleStretchDoesNotKeepTheLongBackoffAfterTheReturn(t *testing.T) {
	s := New(Policy{Seed: 17})
	throttledBurst(t, s, t0, 0, 4*time.Second)
	slot := s.slot.at
	next := t0.Add(time.Minute)
	var cut time.Time
	for i := 0; i < maxPlaced+1; i++ {
		sent, at := sendWhenDue(t, s, next, batch("c-9"))
		cut = at.Add(5 * time.Second) // held 5 s, cut by the balancer: the control plane is still away
		next = s.Step(cut, Answer{Sent: sent, Result: refused("EOF")}).At
	}
	back := cut.Add(time.Second)
	p := s.Step(back, Polled{Outage: true}) // the poller learns of the return
	if at, want := p.At.Sub(back), slot*105/100+returnSpread; at > want {
		t.Fatalf("after the return the report waits %v; want its slot from the return, at most %v (slot %v)", at, want, slot)
	}
}

// A control plane (or a proxy before it) that holds every long poll and cuts it without an
// answer, well within a long poll's wait, has the poller find it gone and back again every few
// seconds (a held poll cut, a probe answered: Polled with Held and Outage). A report kept
// waiting is placed from the first such return; placed again from each, a slot longer than the
// cuts' interval never comes, and the changes are never reported.
func TestPollsCutOverAndOverDoNotPushAReportOnForever(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seed    uint64
		waiting func(t *testing.T, s *Submitter) (time.Time, Plan) // sets a report waiting: since when, and the plan
	}{
		{"a burst waiting for its slot", 31, func(t *testing.T, s *Submitter) (time.Time, Plan) {
			exited := t0.Add(time.Minute) // the host's containers exit: a burst waits for its slot
			p := offer(s, exited, batch("c-2"))
			if p.Send != nil {
				t.Fatal("the host's burst is reported at once, not at its slot")
			}
			return exited, p
		}},
		{"a failed report", 32, func(t *testing.T, s *Submitter) (time.Time, Plan) {
			sent, at := sendWhenDue(t, s, t0.Add(time.Minute), batch("c-2"))
			failed := at.Add(10 * time.Millisecond)
			return failed, s.Step(failed, Answer{Sent: sent, Result: refused("connection reset")})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Its slot, learnt from a burst throttled for 12 s, is long.
			s := New(Policy{Seed: tc.seed, ReturnSpread: time.Millisecond})
			throttledBurst(t, s, t0, 0, 12*time.Second)
			slot := s.slot.at
			since, p := tc.waiting(t, s)
			deadline := since.Add(2*slot + 2*time.Second)
			for now := since.Add(5 * time.Second); now.Before(deadline); now = now.Add(5 * time.Second) {
				if p.At.After(now) {
					p = s.Step(now, Polled{Outage: true, Held: true})
					continue
				}
				if offer(s, p.At, batch("c-2")).Send == nil {
					t.Fatalf("nothing sent at its own next attempt %v after it began waiting", p.At.Sub(since))
				}
				return
			}
			t.Fatalf("slot %v, its polls cut every 5 s: still waiting %v after it began (next attempt %v after)", slot, deadline.Sub(since), p.At.Sub(since))
		})
	}
}
