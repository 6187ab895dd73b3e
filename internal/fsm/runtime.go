package fsm

import (
	"fmt"

	"github.com/agentd/agentd/internal/event"
)

// What the runtime did, as records. The journal never claims more than the runtime said: an
// outcome that says nothing about the container (the runtime is down, a stop failed) records
// nothing and asks for a retry; an outcome overtaken by another record (an exit, a stop) is
// dropped, and the projection decides again from what it now holds.

// actionFinished maps a runtime call's outcome to records.
func (s *State) actionFinished(in ActionFinished) Verdict {
	a, r := in.Action, in.Result
	if a.Kind == ActRemoveImage {
		return s.imageRemovalFinished(a, r)
	}
	var v Verdict
	t := s.Tasks[a.Task]
	if t == nil {
		return v
	}
	c := t.Container(a.Container)
	if c == nil {
		return v
	}
	rec := func(e event.Event) {
		v.Records = append(v.Records, event.Record{Task: a.Task, Container: a.Container, Event: e})
	}
	switch a.Kind {
	case ActRemove:
		switch {
		case r.Kind != Succeeded && r.Kind != Vanished:
			v.Retry = true
		case t.Known == event.StatusCleaning && !c.Removed:
			rec(&event.ContainerRemoved{RuntimeID: c.RuntimeID})
		}
		return v
	case ActInspect:
		if c.InFlight != ActStart {
			return v // settled meanwhile
		}
		switch r.Kind {
		case Vanished:
			rec(&event.CallEnded{Call: string(ActStart), Reason: "container vanished from the runtime"})
			rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "container vanished from the runtime"})
		case Succeeded:
			s.startSettled(c, r, rec)
		default:
			v.Retry = true
		}
		return v
	case ActFence:
		v.Retry = s.fenceFinished(a, r, t, c, rec)
		return v
	}
	if c.Known != a.From {
		return v // overtaken: the projection decides again
	}
	switch {
	case a.Kind == ActStart && (r.Kind == Unavailable || r.Kind == Unknown):
		// It may have run: the container stays in flight and the runtime is asked.
	case r.Kind == Unavailable || r.Kind == Unknown:
		v.Retry = true // nothing is known of the container: the call is safe to make again
	case a.Kind == ActStop && r.Kind == Failed:
		v.Retry = true
	case a.Kind == ActStart && r.Kind == Vanished && !c.RolledBack && (c.StartsAsked <= 1 || !fenceGuard):
		// Gone before it ever started (no start was in flight before this one): Docker rolled
		// back the create a killed agent was making. Nothing of it ran: it is made again, once.
		rec(&event.CallEnded{Call: string(ActStart), Reason: "container vanished from the runtime before it started"})
		rec(&event.ContainerRolledBack{RuntimeID: c.RuntimeID, Reason: "the runtime no longer has it and it never started (a create rolled back): created again"})
	case a.Kind == ActStart && r.Kind == Failed && r.Ran:
		// The start answered with an error, yet the runtime shows the container ran (it ended
		// before the answer): journaled as having run, not as never started.
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, StartedAt: r.StartedAt, NetworkBindings: r.Bindings,
			Reason: "ran, though its start answered: " + r.Err})
		if r.Exited {
			rec(&event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(r.ExitCode), Reason: oomReason(r.OOMKilled, "")})
		}
	case a.Kind == ActStart && r.Kind == Failed && c.StartsAsked >= 2 && fenceGuard:
		// A second start failed, and the first may yet land: the container is fenced (Decide),
		// never started a third time — then made again while its task runs on, else STOPPED.
		rec(&event.CallEnded{Call: string(ActStart), Reason: "failed: " + r.Err})
	case a.Kind == ActStop:
		e := &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "stopped by agentd: " + t.StopCause}
		if r.Kind == Vanished {
			e.Reason = "container vanished from the runtime"
		} else if r.Exited {
			e.ExitCode = exitCode(r.ExitCode)
			e.Reason = oomReason(r.OOMKilled, e.Reason)
		}
		rec(e)
	case r.Kind != Succeeded:
		why := r.Err
		if r.Kind == Vanished {
			why = "container vanished from the runtime"
		}
		if a.Kind == ActStart {
			rec(&event.CallEnded{Call: string(ActStart), Reason: "failed: " + why})
		}
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: fmt.Sprintf("%s failed: %s", a.Kind, why)})
	case a.Kind == ActPull:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusPulled, Reason: r.Note,
			ImageID: r.ImageID, ImageDigest: r.ImageDigest, ImagePulled: r.ImagePulled && r.ImageID != "", ImageRefExisted: r.ImageRefExisted && r.ImageID != ""})
	case a.Kind == ActCreate:
		e := &event.ContainerTransitioned{From: c.Known, To: event.StatusCreated, RuntimeID: r.RuntimeID}
		switch {
		case c.Known == event.StatusCreated && c.Again:
			e.Reason = "created again: its fence removed the container whose start was asked twice"
		case c.Known == event.StatusCreated:
			e.Reason = "created again: the runtime rolled back its first create"
		}
		rec(e)
	case a.Kind == ActStart:
		r.Running = !r.Exited
		s.startSettled(c, r, rec)
	}
	return v
}

// startSettled records what became of a start: it runs (with the ports bound for it), or ran
// and ended, or — the runtime shows it never started — the start is over and may be made
// again.
func (s *State) startSettled(c *Container, r Result, rec func(event.Event)) {
	switch {
	case r.Exited:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, NetworkBindings: r.Bindings})
		rec(&event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(r.ExitCode), Reason: oomReason(r.OOMKilled, "")})
	case r.Running:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, NetworkBindings: r.Bindings})
	default:
		rec(&event.CallEnded{Call: string(ActStart), Reason: "the runtime shows it never started"})
	}
}

// fenceFinished records what a fence came to: the container removed before it ever ran, and
// then made again if the fence was decided for that and its task is still not stopping, else
// STOPPED (as decided, or for the stop that came meanwhile); or started after all (the start
// asked earlier landed): RUNNING, and its exit if it ended, as a start's outcome; or gone. A
// container no longer CREATED, another incarnation, or one with a start in flight again
// decides again. It says whether the fence is to be tried again.
func (s *State) fenceFinished(a Action, r Result, t *Task, c *Container, rec func(event.Event)) (retry bool) {
	if c.Known != event.StatusCreated || c.InFlight != "" || c.Removed || a.RuntimeID != c.RuntimeID {
		return false
	}
	switch {
	case r.Kind == Succeeded && (r.Running || r.Exited):
		s.startSettled(c, r, rec)
	case r.Kind == Succeeded && a.Again && !t.Stopping():
		rec(&event.ContainerRemoved{RuntimeID: c.RuntimeID, Fence: true, Again: true})
	case r.Kind == Succeeded && a.Again:
		rec(&event.ContainerRemoved{RuntimeID: c.RuntimeID, Fence: true})
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "not started: " + stopReason(t)})
	case r.Kind == Succeeded:
		rec(&event.ContainerRemoved{RuntimeID: c.RuntimeID, Fence: true})
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: a.Why, StopsTask: a.StopsTask})
	case r.Kind == Vanished:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "container vanished from the runtime"})
	default:
		return true
	}
	return false
}

// oomReason is the reason of a container's STOPPED: OutOfMemory when the kernel killed it for
// its memory limit (PROTOCOL.md §4), else the reason given.
func oomReason(oom bool, reason string) string {
	if oom {
		return event.OutOfMemoryReason
	}
	return reason
}

// exited maps an exit from the runtime's event stream to a record, once: an exit of a
// container that is not RUNNING in the projection (already stopped, or another incarnation)
// records nothing; one that comes before the start was journaled is held.
func (s *State) exited(x ContainerExited) Verdict {
	var v Verdict
	t := s.Tasks[x.Task]
	if t == nil {
		return v
	}
	c := t.Container(x.Container)
	if c == nil || (c.RuntimeID != "" && c.RuntimeID != x.RuntimeID) {
		return v
	}
	switch c.Known {
	case event.StatusRunning:
		v.Records = []event.Record{{Task: x.Task, Container: x.Container,
			Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(x.ExitCode), Reason: oomReason(x.OOMKilled, x.Reason), Cursor: x.Cursor}}}
	case event.StatusCreated:
		v.Hold = true
	}
	return v
}

// HeldFate is what becomes of an exit held (Verdict.Hold) once a record is applied.
type HeldFate int

const (
	KeepHeld HeldFate = iota // still waiting for its container's start to be journaled
	HandIn                   // its start is journaled now: hand it in again (Step) to be recorded
	DropHeld                 // its task is cleaned: the start will never be journaled
)

// heldExitAfter says what becomes of a held exit once r is applied (the projection holds r).
// It protects: an exit seen before its start was journaled is recorded as soon as the start
// is — never lost while the container is RUNNING in the journal — and the node keeps
// nothing of a task once it is cleaned.
func (s *State) heldExitAfter(r event.Record, x ContainerExited) HeldFate {
	if r.Task != x.Task {
		return KeepHeld
	}
	switch e := r.Event.(type) {
	case *event.TaskCleaned:
		return DropHeld
	case *event.ContainerTransitioned:
		if e.To != event.StatusRunning || r.Container != x.Container {
			return KeepHeld
		}
		if t := s.Tasks[r.Task]; t != nil {
			if c := t.Container(r.Container); c != nil && c.RuntimeID == x.RuntimeID {
				return HandIn
			}
		}
	}
	return KeepHeld
}

// reconcile maps what the runtime holds after a restart to records: a container that exited
// while the agent was down is recorded exited with its code; one the runtime no longer has is
// recorded STOPPED with a reason; one created but never journaled (a crash between create and
// journaling its id) is adopted, not created again; one found running is recorded RUNNING.
// Containers of this agent that the projection does not know are Strangers, left alone.
func (s *State) reconcile(in RuntimeObserved) Verdict {
	var v Verdict
	byID := map[string]Observed{}
	byName := map[[2]string]Observed{}
	for _, o := range in.Containers {
		byID[o.ID] = o
		if !o.Gone {
			byName[[2]string{o.Task, o.Container}] = o
		}
	}
	known := map[string]bool{}
	for _, t := range s.SortedTasks() {
		for _, c := range t.Containers {
			known[c.RuntimeID] = true
		}
		if t.Known.Rank() >= event.StatusStopped.Rank() {
			continue
		}
		for _, c := range t.Containers {
			rec := func(e event.Event) {
				v.Records = append(v.Records, event.Record{Task: t.ARN, Container: c.Name, Event: e})
			}
			if (c.Known == event.StatusPulled || c.Known == event.StatusCreated) && c.RuntimeID == "" {
				// Created but never journaled (a crash between the create and its record; a
				// container made again after a rollback is CREATED without an id).
				if o, ok := byName[[2]string{t.ARN, c.Name}]; ok {
					rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusCreated, RuntimeID: o.ID, Reason: "adopted after restart"})
					known[o.ID] = true
				}
				continue
			}
			if c.RuntimeID == "" || (c.Known != event.StatusCreated && c.Known != event.StatusRunning) {
				continue
			}
			o, ok := byID[c.RuntimeID]
			switch {
			case !ok:
				// Neither listed nor known to be gone (the runtime hiccuped): the event
				// stream will tell.
			case o.Gone && c.Known == event.StatusCreated && c.InFlight == "" && !c.RolledBack && (c.StartsAsked == 0 || !fenceGuard):
				// (One whose start was asked may have run before it went: STOPPED, below.)
				rec(&event.ContainerRolledBack{RuntimeID: c.RuntimeID, Reason: "the runtime no longer has it and it never started (a create rolled back): created again"})
			case o.Gone:
				if c.InFlight != "" {
					rec(&event.CallEnded{Call: string(c.InFlight), Reason: "container vanished from the runtime"})
				}
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "container vanished from the runtime while the agent was down"})
			case o.Exited && c.Known == event.StatusRunning:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, ExitCode: exitCode(o.ExitCode), Reason: oomReason(o.OOMKilled, "exited while the agent was down")})
			case o.Exited && c.Known == event.StatusCreated:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning})
				rec(&event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(o.ExitCode), Reason: oomReason(o.OOMKilled, "exited while the agent was down")})
			case o.Running && c.Known == event.StatusCreated:
				// With the ports bound for it: its RUNNING is reported with them (PROTOCOL.md §4).
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, Reason: "found running after restart", NetworkBindings: o.Bindings})
			}
		}
	}
	for _, o := range in.Containers {
		if !o.Gone && !known[o.ID] {
			v.Strangers = append(v.Strangers, o)
		}
	}
	return v
}

func exitCode(code int) *int { return &code }

// health maps a health verdict to records: the container's when it changed (a repeat, or a
// verdict of a container not RUNNING, or of another incarnation, records nothing), then its
// task's when the worst verdict of the task's essential containers with a check changed.
func (s *State) health(in HealthObserved) []event.Record {
	t := s.Tasks[in.Task]
	if t == nil {
		return nil
	}
	c := t.Container(in.Container)
	if c == nil || c.Known != event.StatusRunning || c.RuntimeID != in.RuntimeID || c.Health == in.Health ||
		(in.Health != event.HealthHealthy && in.Health != event.HealthUnhealthy) {
		return nil
	}
	recs := []event.Record{{Task: t.ARN, Container: c.Name, Event: &event.HealthChanged{Health: in.Health}}}
	worst, checked := event.HealthHealthy, false
	for _, o := range t.Containers {
		if !o.Essential || o.HealthCheck == nil {
			continue
		}
		h := o.Health
		if o == c {
			h = in.Health
		}
		checked = true
		switch h {
		case event.HealthUnhealthy:
			worst = event.HealthUnhealthy
		case event.HealthUnknown:
			if worst == event.HealthHealthy {
				worst = event.HealthUnknown
			}
		}
	}
	if checked && worst != event.HealthUnknown && worst != t.Health {
		recs = append(recs, event.Record{Task: t.ARN, Event: &event.HealthChanged{Health: worst}})
	}
	return recs
}
