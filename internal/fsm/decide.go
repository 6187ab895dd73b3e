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
	// ActInspect asks the runtime what became of a start whose outcome is not journaled (it
	// timed out, the runtime did not answer, the process crashed, the commit of its outcome
	// failed). It has no effect, so it needs no intent; it goes only while the start itself
	// is not in flight (Gate).
	ActInspect ActionKind = "inspect"
	// ActRemoveImage removes an image the agent pulled and no task uses (images.go). It has
	// no task; its Container is the image id, RuntimeID too.
	ActRemoveImage ActionKind = "remove-image"
	// ActFence removes a CREATED container whose start was asked unless it has started
	// (runtime.Runtime.RemoveUnlessStarted), before it is declared STOPPED without having
	// run or made again: a start asked earlier — by a process that died, or a call whose
	// answer was lost — may still land, and after the fence it cannot. Safe to repeat: it
	// needs no intent.
	ActFence ActionKind = "fence"
)

// Action asks the runtime to do something to one container. The engine runs it and hands the
// outcome to Step; until the outcome's record is applied, Decide keeps proposing the action,
// so the node keeps track of what it already has in flight (by Key), and Gate says from
// that whether a decided action may go now.
type Action struct {
	Kind      ActionKind
	Task      string
	Container string
	Spec      event.ContainerSpec
	RuntimeID string
	From      event.Status // the container's status when decided, for the record of the outcome
	ImageID   string       // create: the image its pull resolved to, to create from
	Refs      []string     // image removal: the references the agent pulled the image by, to take back
	// Fence: the STOPPED the container is recorded with once fenced — why it does not run,
	// and whether that stops its task; or Again: it is made again once fenced, as a new
	// container, when its task is not stopping by then.
	Why       string
	StopsTask bool
	Again     bool
}

// ActionKey identifies an action for de-duplication while it is in flight or backing off.
type ActionKey struct {
	Kind      ActionKind
	Task      string
	Container string
}

// Key is the action's identity.
func (a Action) Key() ActionKey { return ActionKey{Kind: a.Kind, Task: a.Task, Container: a.Container} }

func (k ActionKey) String() string {
	if k.Task == "" {
		return string(k.Kind) + " " + k.Container // an image action
	}
	return string(k.Kind) + " " + k.Task + "/" + k.Container
}

// Config is what decisions depend on besides the journal. It is not journaled: an operator
// may change it between runs, and cleanup deadlines follow (from the journaled stop time).
type Config struct {
	CleanupWait time.Duration
}

// Decisions is what should happen next, at a given "now".
type Decisions struct {
	Records []event.Record // to journal now (Time is now; Seq is assigned when journaled)
	Actions []Action       // runtime operations
	// Wakes are the times at which a task's decisions change by time alone, other than its
	// cleanup (CleanupDue): a dependency's start_timeout_s running out. The engine decides
	// for the task again then; Decide at an earlier now gives the same decisions.
	Wakes []Wake
}

// Wake asks for a task to be decided again at a time.
type Wake struct {
	Task    string
	At      time.Time
	Cleanup bool // the task's cleanup deadline (Node: the caller may add jitter)
}

// Intent is the record journaled before an action's call is made, for calls that must never
// be made twice (a start); none for the others, which are safe to repeat.
func (a Action) Intent() []event.Record {
	if a.Kind != ActStart || !inFlightGuard {
		return nil
	}
	return []event.Record{{Task: a.Task, Container: a.Container, Event: &event.CallStarted{Call: string(ActStart)}}}
}

// CleanupAllowed reports whether a task may enter CLEANING: it is STOPPED_ACKED (and, in a
// with the CleanupAfterAck guard off only, STOPPED).
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

// decide says what should happen next for the given tasks (all live tasks, in ARN order, when
// none are named). It reads the projection only; the same projection, now and config always
// give the same decisions.
func (s *State) decide(now time.Time, cfg Config, arns ...string) Decisions {
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

func (s *State) decideTask(d *Decisions, t *Task, now time.Time, cfg Config) {
	rec := func(container string, e event.Event) {
		d.Records = append(d.Records, event.Record{Time: now, Task: t.ARN, Container: container, Event: e})
	}
	act := func(kind ActionKind, c *Container) {
		d.Actions = append(d.Actions, Action{Kind: kind, Task: t.ARN, Container: c.Name, Spec: c.ContainerSpec, RuntimeID: c.RuntimeID, From: c.Known, ImageID: c.ImageID})
	}
	// notStarted declares a container that never ran STOPPED — after a fence, when a start of
	// it was asked (it may still land).
	notStarted := func(c *Container, why string, stopsTask bool) {
		if fenced(c) {
			act(ActFence, c)
			d.Actions[len(d.Actions)-1].Why, d.Actions[len(d.Actions)-1].StopsTask = why, stopsTask
			return
		}
		rec(c.Name, &event.ContainerTransitioned{From: c.Known, To: event.StatusStopped, Reason: why, StopsTask: stopsTask})
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
		// The cleanup wait counts from the journaled stop time; the engine wakes for it.
		if t.CleanupAllowed() && !now.Before(t.CleanupDue(cfg)) {
			rec("", &event.CleanupStarted{})
		}
	case event.StatusStopped:
		// The only door to cleanup: the task's STOPPED change settled by the control plane.
		if t.Sent == event.StatusStopped || !settleRule { // !settleRule: with the SettleRule guard off only
			rec("", &event.StoppedAcked{ChangeID: s.ChangeID(t.StopSeq)})
		} else if t.CleanupAllowed() && !now.Before(t.CleanupDue(cfg)) {
			rec("", &event.CleanupStarted{}) // the seed's bug: reachable with the CleanupAfterAck guard off only
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
				switch {
				case c.Known == event.StatusRunning:
					act(ActStop, c)
				case c.Known == event.StatusStopped:
				case c.InFlight != "" && inFlightGuard:
					// A start may have happened: the container is not declared stopped
					// until the runtime says what became of it.
					act(ActInspect, c)
				default:
					notStarted(c, "not started: "+why, false)
				}
			}
			return
		}
		for _, c := range t.Containers {
			switch {
			case c.InFlight != "":
				act(ActInspect, c)
			case c.Known == event.StatusNone:
				act(ActPull, c)
			case c.Known == event.StatusPulled, c.Known == event.StatusCreated && c.RuntimeID == "" && (c.RolledBack || c.Again):
				act(ActCreate, c) // a rolled-back or fenced container is made again
			case c.Known == event.StatusCreated && c.StartsAsked >= 2 && fenceGuard:
				// Asked twice and it never ran: no third start of this container. Fenced, so
				// neither start can land any more, it is made again as a new one and started
				// afresh: a crash loop fences it at most once for every two starts it loses.
				act(ActFence, c)
				d.Actions[len(d.Actions)-1].Why, d.Actions[len(d.Actions)-1].Again = "not started: its start was asked twice and it never ran", true
			case c.Known == event.StatusCreated:
				switch v := dependencies(t, c, now); {
				case v.unmet != "":
					notStarted(c, "not started: "+v.unmet, v.stopsTask)
				case len(v.waitingOn) == 0:
					act(ActStart, c)
				case !v.due.IsZero():
					// Nothing journaled will wake the task when a start_timeout_s runs
					// out: the engine must, at that time.
					d.Wakes = append(d.Wakes, Wake{Task: t.ARN, At: v.due})
				}
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

// fenced reports whether a container must be fenced before it is declared STOPPED without
// having run: CREATED, a start of it asked (which may still land), nothing in flight.
func fenced(c *Container) bool {
	return fenceGuard && c.Known == event.StatusCreated && c.StartsAsked > 0 && c.InFlight == "" && c.RuntimeID != ""
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
