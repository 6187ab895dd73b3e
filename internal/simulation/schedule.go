package simulation

// The schedule: what happens at each step — a task assigned or stopped, a poll, a fault
// (throttling, a broken poll, a crash, a full disk, a clock jump), or time passing — and the
// runtime's faults on each call, all drawn from the seed.

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/runtime"
	"github.com/agentd/agentd/internal/simruntime"
)

func (s *sim) step() {
	if s.diskFull && s.rng.IntN(6) == 0 {
		s.diskFull = false // a full disk is freed again within a few steps
		s.log("disk full false")
	}
	switch k := s.rng.IntN(100); {
	case k < 8 && len(s.assigned) < s.o.Tasks:
		if s.rng.IntN(10) == 0 {
			s.poison()
		} else {
			s.assign()
		}
	case k < 20:
		s.poll()
	case k < 23 && len(s.assigned) > 0:
		arn := s.assigned[s.rng.IntN(len(s.assigned))]
		_ = s.cp.StopTask(arn)
		s.log("control plane stops %s", arn)
	case k < 26:
		s.cp.BreakPoll(agentID)
		s.log("poll connection breaks: acknowledged payloads of tasks not known STOPPED will be re-sent")
	case k < 29:
		s.throttled = !s.throttled
		s.log("throttling %v", s.throttled)
	case k < 31:
		s.crash()
	case k < 33:
		// A full disk comes and goes: every burst committed meanwhile fails, its effects
		// dropped and the projection rebuilt — at whatever point the burst was.
		s.diskFull = !s.diskFull
		s.log("disk full %v", s.diskFull)
	case k < 34:
		// The clock jumps forward (a suspended VM, an NTP step): every wait measured from a
		// journaled time must come out right.
		d := time.Duration(1+s.rng.IntN(120)) * time.Minute
		s.clock.now = s.clock.now.Add(d)
		s.log("clock jumps %s", d)
	case k < 60:
		if !s.runWork() && !s.feedExits() {
			s.advance(time.Duration(s.rng.IntN(2000)) * time.Millisecond)
		}
	default:
		s.feedExits()
		s.runWork()
		s.advance(time.Duration(s.rng.IntN(500)) * time.Millisecond)
	}
}

// runtimeFault is what the runtime makes of one call (SetFaults): Docker's sharp edges, drawn
// from the seed — a call that times out or breaks after it took effect, one that fails before
// it does because the engine is away, and a list that finds the engine away after a crash
// until the seed says it is back.
func (s *sim) runtimeFault(op, id string) simruntime.Fault {
	if !s.faults {
		return simruntime.Fault{}
	}
	if op == "list" && s.runtimeDown {
		// The engine is away at the agent's start: reconcile finds nothing until it is
		// back, which the seed decides try by try.
		if s.rng.IntN(3) == 0 {
			s.runtimeDown = false
			s.log("the runtime answers again")
		} else {
			return simruntime.Fault{NoEffect: true, Err: runtime.ErrUnavailable}
		}
	}
	switch k := s.rng.IntN(100); {
	case k < 3:
		return simruntime.Fault{Err: context.DeadlineExceeded}
	case k < 5:
		return simruntime.Fault{NoEffect: true, Err: runtime.ErrUnavailable}
	}
	return simruntime.Fault{}
}
