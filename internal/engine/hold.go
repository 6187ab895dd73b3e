package engine

import (
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/runtime"
)

// exitHold is the exits from the runtime's stream that are not journaled yet. It guards that
// an exit is never lost: one that came before its start was journaled waits (held) until the
// core says it may be handed in again or dropped (fsm.State.HeldExitAfter), and one whose
// burst the journal refused is kept (refused) until a commit takes it, since nothing else
// re-derives it before a restart.
type exitHold struct {
	held     map[string]runtime.Exit // exits seen before their start was journaled, by runtime id
	released []runtime.Exit          // held exits whose start is now journaled, to hand in again
	refused  []runtime.Exit          // exits the journal refused, kept until it takes them
	// from is where the exit stream resumes (Recover sets it): the journaled cursor, but
	// never later than a little before recovery began.
	from int64
}

// resumeAt sets where the exit stream resumes: from the journaled cursor (the last exit the
// journal holds from the stream), but never from later than a little before recovery began:
// reconciliation covered the time the agent was down, and the overlap covers the moments
// between reconciling and subscribing. Exits are journaled once however often they are seen.
func (h *exitHold) resumeAt(journaled int64, recovering time.Time) {
	h.from = recovering.Add(-time.Second).UnixNano()
	if journaled > 0 && journaled < h.from {
		h.from = journaled
	}
}

// after moves the held exits a record decides: handed in again or dropped.
func (h *exitHold) after(st *fsm.State, r event.Record) {
	for id, x := range h.held {
		switch st.HeldExitAfter(r, exitInput(x)) {
		case fsm.HandIn:
			delete(h.held, id)
			h.released = append(h.released, x)
		case fsm.DropHeld:
			delete(h.held, id) // its start was never journaled and never will be
		}
	}
}

// next takes the first released exit.
func (h *exitHold) next() (runtime.Exit, bool) {
	if len(h.released) == 0 {
		return runtime.Exit{}, false
	}
	x := h.released[0]
	h.released = h.released[1:]
	return x, true
}

// handleExit journals a container's exit from the event stream, once; an exit that came
// before its start was journaled is held until it is.
func (e *Engine) handleExit(now time.Time, in ExitInput) {
	x := in.Exit
	v := e.st.Step(now, exitInput(x))
	if v.Hold {
		e.exits.held[x.ID] = x
		return
	}
	if len(v.Records) > 0 {
		e.record(v.Records...)
		// A fact from outside that nothing re-derives until a restart: should the commit
		// fail, it is handed in again.
		e.burst.exits = append(e.burst.exits, x)
	}
}

// handleRefusedExits hands in again, once the journal's retry time has come, the exits of
// bursts it refused.
func (e *Engine) handleRefusedExits(now time.Time) {
	if len(e.exits.refused) == 0 || e.sched.journalRetry.After(now) {
		return
	}
	exits := e.exits.refused
	e.exits.refused = nil
	for _, x := range exits {
		e.handleExit(now, ExitInput{Exit: x})
	}
}

// exitInput is the core's input for an exit from the runtime's stream.
func exitInput(x runtime.Exit) fsm.ContainerExited {
	return fsm.ContainerExited{Task: x.Task, Container: x.Container, RuntimeID: x.ID, ExitCode: x.ExitCode, OOMKilled: x.OOMKilled, Reason: x.Reason, Cursor: x.Cursor}
}
