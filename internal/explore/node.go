package explore

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/protocol"
)

// node is the agent under exploration: the core and what the engine keeps beside it.
//
// REPLACE with fsm.Node (issue 42, the node's branch) once it lands: until then this is a
// thin adapter over today's doors of the core — Step, Decide, InFlight.Gate, PlanImageCycle,
// HeldExitAfter and Apply — with the engine's glue around them (engine/loop.go react,
// engine/act.go dispatch and handleAction, engine/ready.go record) in its smallest form:
// every task decided each burst (the engine decides the dirty ones), a failed call retried
// at the next tick (the engine backs off), a report whenever none is out and something is
// unsent (the engine asks its submitter). What it drives is the real core; what it adds is
// as little engine as a burst needs.
type node struct {
	st      *fsm.State
	backoff []fsm.ActionKey       // failed calls: they go again after a tick
	held    []fsm.ContainerExited // exits seen before their start was journaled
}

// cleanupWait is the agent's --cleanup-wait: a tick passes it.
const cleanupWait = time.Minute

// ready is what one burst came to: the records journaled, the calls released, and what broke.
type ready struct {
	records    []event.Record
	actions    []fsm.Action
	violations []string              // the invariant checker's findings on the records the core made
	released   []fsm.ContainerExited // held exits handed in again, at the next round
}

func (n *node) clone() node {
	return node{st: n.st.Clone(), backoff: slices.Clone(n.backoff), held: slices.Clone(n.held)}
}

// burst hands one input to the core (nil: none, a tick), journals what it maps to, then
// decides until nothing more follows: the calls it releases are gated over those out.
func (n *node) burst(now time.Time, in fsm.Input, out []call, imageCycle bool) ready {
	var r ready
	chk := fsm.NewChecker(n.st)
	if in != nil {
		v := n.st.Step(now, in)
		n.apply(now, chk, &r, v.Records)
		if af, ok := in.(fsm.ActionFinished); ok && v.Retry {
			n.backoff = append(n.backoff, af.Action.Key())
		}
		if x, ok := in.(fsm.ContainerExited); ok && v.Hold {
			n.held = append(n.held, x)
		}
	}
	f := fsm.NewInFlight(0)
	for _, c := range out {
		f.Add(c.a.Key())
	}
	cfg := fsm.Config{CleanupWait: cleanupWait}
	for round := 0; round < 16; round++ {
		before := len(r.records)
		for len(r.released) > 0 {
			x := r.released[0]
			r.released = r.released[1:]
			n.apply(now, chk, &r, n.st.Step(now, x).Records)
		}
		d := n.st.Decide(now, cfg)
		n.apply(now, chk, &r, d.Records)
		for _, a := range d.Actions {
			if slices.Contains(n.backoff, a.Key()) || f.Gate(a).Reason != fsm.Go {
				continue
			}
			f.Add(a.Key())
			n.apply(now, chk, &r, a.Intent())
			r.actions = append(r.actions, a)
		}
		if len(r.records) == before {
			break
		}
	}
	if imageCycle {
		plan := n.st.PlanImageCycle(now, fsm.ImageConfig{PerCycle: 1, LowFreePercent: 10}, fsm.ImageCycle{Free: 1, Total: 100}, f)
		for _, a := range plan.Removals {
			if f.Gate(a).Reason == fsm.Go {
				f.Add(a.Key())
				r.actions = append(r.actions, a)
			}
		}
	}
	return r
}

// apply numbers, checks and applies records; one the projection refuses is a violation and is
// not journaled (the engine quarantines its task). Held exits go where the core says.
func (n *node) apply(now time.Time, chk *fsm.Checker, r *ready, recs []event.Record) {
	for _, rec := range recs {
		rec.Seq, rec.Time = n.st.LastSeq+1, now
		seen := len(chk.Violations)
		chk.Record(rec)
		if len(chk.Violations) > seen {
			for _, v := range chk.Violations[seen:] {
				r.violations = append(r.violations, "INVARIANT: "+v.String())
			}
			continue
		}
		r.records = append(r.records, rec)
		for k := 0; k < len(n.held); k++ {
			switch n.st.HeldExitAfter(rec, n.held[k]) {
			case fsm.HandIn: // handed in at the next round, after this call's records (engine/hold.go)
				r.released = append(r.released, n.held[k])
				n.held = slices.Delete(n.held, k, k+1)
				k--
			case fsm.DropHeld:
				n.held = slices.Delete(n.held, k, k+1)
				k--
			}
		}
	}
}

// recoverFrom starts the agent again on the journal's projection: what it kept in memory is
// gone; it journals its start and what the runtime holds, then decides.
func (n *node) recoverFrom(now time.Time, obs fsm.RuntimeObserved) ready {
	n.backoff, n.held = nil, nil
	var r ready
	n.apply(now, fsm.NewChecker(n.st), &r, []event.Record{{Event: &event.AgentStarted{AgentID: "agent-explore", JournalID: "J"}}})
	r2 := n.burst(now, obs, nil, false)
	r2.records = append(r.records, r2.records...)
	r2.violations = append(r.violations, r2.violations...)
	return r2
}

// report is the next report, when none is out: the oldest unsent changes.
func (n *node) report() []protocol.StateChange {
	if n.st.OutboxLen() == 0 {
		return nil
	}
	var out []protocol.StateChange
	for _, c := range n.st.Pending(10) {
		out = append(out, protocol.StateChange{ID: c.ID, TaskARN: c.Task, Container: c.Container, Status: string(c.Status),
			ExitCode: c.ExitCode, Reason: c.Reason, At: c.At, Health: string(c.Health)})
	}
	return out
}
