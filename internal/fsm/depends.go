package fsm

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Dependencies (PROTOCOL.md §4 depends_on, 1.2 start_timeout_s): when a CREATED container may
// start, what it waits for meanwhile, and when waiting is over for good.
//
// Time enters only as the "now" passed in. Waits and start_timeout_s count from the task's
// arrival (its task_added record's time), a journaled time: a restart neither resets nor skips a
// deadline, and the wait an operator reads is the one the deadline is measured on.

// Wait is what a CREATED container that may not start yet waits for: derived from the
// projection whenever it is asked for, never journaled.
type Wait struct {
	Container string             // the waiting container
	On        []event.Dependency // its conditions that do not hold yet, in depends_on order
	// What each of them stands at, in the same order: "db is RUNNING, UNHEALTHY".
	Standing []string
	Since    time.Time // the task's arrival
	// Due is the earliest start_timeout_s deadline among On (zero: none has one): past it
	// the container never starts.
	Due time.Time
}

// Reason says what the container waits for and how long it has, e.g. "waiting for db HEALTHY,
// 3m12s (db is RUNNING, UNHEALTHY; start_timeout_s 300)". The duration counts from the task's
// arrival to now, in whole seconds.
func (w Wait) Reason(now time.Time) string {
	return fmt.Sprintf("waiting for %s, %s (%s)", w.For(), w.Waited(now), strings.Join(w.Standing, "; "))
}

// For names the conditions waited for: "db HEALTHY and init SUCCESS".
func (w Wait) For() string {
	names := make([]string, len(w.On))
	for i, d := range w.On {
		names[i] = d.Container + " " + d.Condition
	}
	return strings.Join(names, " and ")
}

// Waited is how long the wait has lasted at now, in whole seconds (never negative, should
// the clock have stepped back).
func (w Wait) Waited(now time.Time) time.Duration {
	return max(now.Sub(w.Since), 0).Truncate(time.Second)
}

// Waiting says what a container waits for before it may start: ok is false when it waits for
// nothing (it is not CREATED, a start is in flight, its task is stopping, every condition holds,
// or one can no longer hold — Decide then stops it).
func (t *Task) Waiting(c *Container, now time.Time) (w Wait, ok bool) {
	if t.Stopping() || c.Known != event.StatusCreated || c.InFlight != "" {
		return Wait{}, false
	}
	v := dependencies(t, c, now)
	if v.unmet != "" || len(v.waitingOn) == 0 {
		return Wait{}, false
	}
	w = Wait{Container: c.Name, On: v.waitingOn, Since: t.AddedAt, Due: v.due}
	for _, d := range v.waitingOn {
		w.Standing = append(w.Standing, standing(t.Container(d.Container), d))
	}
	return w, true
}

// standing words where a dependency's container stands, for a wait's reason.
func standing(dep *Container, d event.Dependency) string {
	s := fmt.Sprintf("%s is %s", dep.Name, dep.Known)
	if d.Condition == event.DependHealthy && dep.Health != "" {
		s += ", " + string(dep.Health)
	}
	if dep.StartTimeoutS != nil {
		s += fmt.Sprintf(", start_timeout_s %d", *dep.StartTimeoutS)
	}
	return s
}

// StartDeadline is when a container's start_timeout_s runs out for its dependents (zero: it
// has none): the task's arrival plus the timeout.
func (t *Task) StartDeadline(dep *Container) time.Time {
	if dep.StartTimeoutS == nil {
		return time.Time{}
	}
	return t.AddedAt.Add(time.Duration(*dep.StartTimeoutS) * time.Second)
}

// depVerdict is where a container's depends_on stands at a given now.
type depVerdict struct {
	waitingOn []event.Dependency // conditions that do not hold yet and still may
	due       time.Time          // the earliest start_timeout_s deadline among waitingOn
	// unmet, when non-empty, says which dependency can never hold any more: the container
	// never starts. stopsTask: its STOPPED stops the task even if it is not essential (a
	// dependency that ended without meeting the condition, as before start_timeout_s
	// existed); a start_timeout_s running out stops the task only through an essential
	// dependent (PROTOCOL.md 1.2 §4).
	unmet     string
	stopsTask bool
}

// dependencies reads a container's depends_on against the projection at now. A dependency
// that ended without meeting its condition wins over a deadline that passed, so the reason
// names the cause rather than the clock.
func dependencies(t *Task, c *Container, now time.Time) depVerdict {
	var v depVerdict
	var late *event.Dependency
	for _, d := range c.DependsOn {
		dep := t.Container(d.Container)
		if dep == nil {
			return depVerdict{unmet: fmt.Sprintf("dependency %s (%s) is not a container of the task", d.Container, d.Condition), stopsTask: true}
		}
		met, impossible := d.Met(dep.Known, dep.ExitCode, dep.Health)
		switch {
		case impossible:
			why := "it stopped"
			if dep.ExitCode != nil {
				why = fmt.Sprintf("it exited with code %d", *dep.ExitCode)
			}
			return depVerdict{unmet: fmt.Sprintf("dependency %s (%s) can no longer be met: %s", d.Container, d.Condition, why), stopsTask: true}
		case met:
		default:
			due := t.StartDeadline(dep)
			if !due.IsZero() && !now.Before(due) {
				if late == nil {
					late = &d
				}
				continue
			}
			v.waitingOn = append(v.waitingOn, d)
			if !due.IsZero() && (v.due.IsZero() || due.Before(v.due)) {
				v.due = due
			}
		}
	}
	if late != nil {
		dep := t.Container(late.Container)
		return depVerdict{unmet: fmt.Sprintf("dependency %s %s not met within start_timeout_s %d", late.Container, late.Condition, *dep.StartTimeoutS), stopsTask: c.Essential}
	}
	return v
}
