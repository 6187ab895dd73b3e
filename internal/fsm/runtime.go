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
	if a.Kind == ActRemove {
		switch {
		case r.Kind != Succeeded && r.Kind != Vanished:
			v.Retry = true
		case t.Known == event.StatusCleaning && !c.Removed:
			rec(&event.ContainerRemoved{RuntimeID: c.RuntimeID})
		}
		return v
	}
	if c.Known != a.From {
		return v // overtaken: the projection decides again
	}
	switch {
	case r.Kind == Unavailable:
		v.Retry = true // the runtime is down, not the container: fail nothing
	case a.Kind == ActStop && r.Kind == Failed:
		v.Retry = true
	case a.Kind == ActStop:
		e := &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "stopped by agentd: " + t.StopCause}
		if r.Kind == Vanished {
			e.Reason = "container vanished from the runtime"
		} else if r.Exited {
			e.ExitCode = exitCode(r.ExitCode)
		}
		rec(e)
	case r.Kind != Succeeded:
		why := r.Err
		if r.Kind == Vanished {
			why = "container vanished from the runtime"
		}
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: fmt.Sprintf("%s failed: %s", a.Kind, why)})
	case a.Kind == ActPull:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusPulled})
	case a.Kind == ActCreate:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusCreated, RuntimeID: r.RuntimeID})
	case a.Kind == ActStart:
		rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning})
		if r.Exited { // it ended before its start was journaled
			rec(&event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(r.ExitCode)})
		}
	}
	return v
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
			Event: &event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(x.ExitCode), Cursor: x.Cursor}}}
	case event.StatusCreated:
		v.Hold = true
	}
	return v
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
			if c.Known == event.StatusPulled && c.RuntimeID == "" {
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
			case o.Gone:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "container vanished from the runtime while the agent was down"})
			case o.Exited && c.Known == event.StatusRunning:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, ExitCode: exitCode(o.ExitCode), Reason: "exited while the agent was down"})
			case o.Exited && c.Known == event.StatusCreated:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning})
				rec(&event.ContainerTransitioned{From: event.StatusRunning, To: event.StatusStopped, ExitCode: exitCode(o.ExitCode), Reason: "exited while the agent was down"})
			case o.Running && c.Known == event.StatusCreated:
				rec(&event.ContainerTransitioned{From: c.Known, To: event.StatusRunning, Reason: "found running after restart"})
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
