package fsm

import (
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// ActionKind is a runtime operation.
type ActionKind string

const (
	ActPull   ActionKind = "pull"
	ActCreate ActionKind = "create"
	ActStart  ActionKind = "start"
	ActStop   ActionKind = "stop"
	ActRemove ActionKind = "remove"
)

// Action asks the runtime to do something to one container. The engine runs it and turns the
// outcome into a record; until that record is applied, Decide keeps proposing the action, so
// the engine keeps track of what it already has in flight (Key).
type Action struct {
	Kind      ActionKind
	Task      string
	Container string
	Spec      event.ContainerSpec
	RuntimeID string
	From      event.Status // the container's status when decided, for the record of the outcome
}

// Key identifies an action for de-duplication while it is in flight.
func (a Action) Key() string { return string(a.Kind) + " " + a.Task + " " + a.Container }

// Config is what decisions depend on besides the journal. It is not journaled: an operator
// may change it between runs, and cleanup deadlines follow (from the journaled stop time).
type Config struct {
	CleanupWait time.Duration
}

// Decisions is what should happen next, at a given "now".
type Decisions struct {
	Records  []event.Record // to journal now (Time is now; Seq is assigned by the journal)
	Actions  []Action       // runtime operations
	Cleanups []string       // tasks whose cleanup is due: STOPPED_ACKED and the wait has passed
	NextDue  time.Time      // the earliest future moment a decision changes with time alone (zero: none)
}

// CleanupAllowed reports whether a task may enter CLEANING: it is STOPPED_ACKED (and, in a
// -tags simbug build only, STOPPED).
func (t *Task) CleanupAllowed() bool {
	return t.Known == event.StatusStoppedAcked || (!ackGuard && t.Known == event.StatusStopped)
}

// CleanupDue is when a task's cleanup may start: its journaled stop time plus the wait. The
// wait never counts from agent start, so a restart neither resets nor skips it.
func (t *Task) CleanupDue(cfg Config) time.Time {
	if t.StoppedAt.IsZero() {
		return time.Time{}
	}
	return t.StoppedAt.Add(cfg.CleanupWait)
}

// Decide says what should happen next for the given tasks (all live tasks, in ARN order, when
// none are named). It reads the projection only; the same projection, now and config always
// give the same decisions.
func (s *State) Decide(now time.Time, cfg Config, arns ...string) Decisions {
	var d Decisions
	if len(arns) == 0 {
		for _, t := range s.SortedTasks() {
			s.decideTask(&d, t, now, cfg)
		}
		return d
	}
	for _, arn := range arns {
		if t, ok := s.Tasks[arn]; ok {
			s.decideTask(&d, t, now, cfg)
		}
	}
	return d
}

var nextUp = map[event.Status]event.Status{
	event.StatusNone: event.StatusPulled, event.StatusPulled: event.StatusCreated, event.StatusCreated: event.StatusRunning,
}

func (s *State) decideTask(d *Decisions, t *Task, now time.Time, cfg Config) {
	rec := func(container string, e event.Event) {
		d.Records = append(d.Records, event.Record{Time: now, Task: t.ARN, Container: container, Event: e})
	}
	act := func(kind ActionKind, c *Container) {
		d.Actions = append(d.Actions, Action{Kind: kind, Task: t.ARN, Container: c.Name, Spec: c.ContainerSpec, RuntimeID: c.RuntimeID, From: c.Known})
	}
	switch t.Known {
	case event.StatusCleaning:
		done := true
		for _, c := range t.Containers {
			if !c.Removed {
				act(ActRemove, c)
				done = false
			}
		}
		if done {
			rec("", &event.TaskCleaned{})
		}
	case event.StatusStoppedAcked:
		if due := t.CleanupDue(cfg); !now.Before(due) {
			d.Cleanups = append(d.Cleanups, t.ARN)
		} else if d.NextDue.IsZero() || due.Before(d.NextDue) {
			d.NextDue = due
		}
	case event.StatusStopped:
		// The only door to cleanup: the task's STOPPED change settled by the control plane.
		if t.Sent == event.StatusStopped {
			rec("", &event.StoppedAcked{ChangeID: s.ChangeID(t.StopSeq)})
		} else if !ackGuard && !now.Before(t.CleanupDue(cfg)) {
			d.Cleanups = append(d.Cleanups, t.ARN) // the seed's bug (-tags simbug only)
		}
	case event.StatusCleaned:
		// Gone from Tasks once applied; nothing to do.
	default:
		allStopped := true
		for _, c := range t.Containers {
			allStopped = allStopped && c.Known == event.StatusStopped
		}
		if allStopped {
			rec("", &event.TaskTransitioned{From: t.Known, To: event.StatusStopped, Reason: stopReason(t)})
			return
		}
		if t.Stopping() {
			why := stopReason(t)
			for _, c := range t.Containers {
				switch c.Known {
				case event.StatusRunning:
					act(ActStop, c)
				case event.StatusStopped:
				default:
					rec(c.Name, &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: "not started: " + why})
				}
			}
			return
		}
		for _, c := range t.Containers {
			switch c.Known {
			case event.StatusNone:
				act(ActPull, c)
			case event.StatusPulled:
				act(ActCreate, c)
			case event.StatusCreated:
				act(ActStart, c)
			}
		}
		if next, ok := nextUp[t.Known]; ok {
			for _, c := range t.Containers {
				if c.Known.Rank() < next.Rank() {
					return
				}
			}
			rec("", &event.TaskTransitioned{From: t.Known, To: next})
		}
	}
}

// stopReason says why a task stopped, for its STOPPED change.
func stopReason(t *Task) string {
	if t.StopCause != "" {
		return t.StopCause
	}
	return "all containers stopped"
}

// essentialStopped words why an essential container's stop stops its task.
func essentialStopped(c *Container) string {
	switch {
	case c.Reason != "":
		return fmt.Sprintf("essential container %s stopped: %s", c.Name, c.Reason)
	case c.ExitCode != nil:
		return fmt.Sprintf("essential container %s exited with code %d", c.Name, *c.ExitCode)
	}
	return fmt.Sprintf("essential container %s stopped", c.Name)
}
