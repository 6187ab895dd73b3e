package model

// What the runtime was asked to do and did, as the journal tells it: a container is started at
// most once (one start outcome, no start while one is in flight, none after its STOPPED or its
// task's), is declared STOPPED only once no start of it is in flight, and its task is declared
// STOPPED only once every container is — none running, no call in flight. Statuses move
// forward only, each from the status the model holds.

import (
	"strconv"

	"github.com/agentd/agentd/internal/event"
)

func callStarted(m *Model, rec event.Record) {
	t, c := m.containerOf(rec)
	if c == nil {
		return
	}
	call := rec.Event.(*event.CallStarted).Call
	switch {
	case t.cleaned:
		m.breaks(rec, RuleTaskTwice, "%s of a container of a cleaned task", call)
	case t.stopped():
		m.breaks(rec, RuleStartAfterStopped, "%s of a container whose task is STOPPED (record %d)", call, t.stopSeq)
	case c.inFlight != "":
		m.breaks(rec, RuleStartedTwice, "%s while a %s of it is in flight", call, c.inFlight)
	case c.known == event.StatusStopped:
		m.breaks(rec, RuleStartAfterStopped, "%s of a container STOPPED at record %d", call, c.stopSeq)
	case c.starts > 0:
		m.breaks(rec, RuleStartedTwice, "%s #%d of a container that already ran", call, c.intents+1)
	case c.fenced:
		m.breaks(rec, RuleStartAfterStopped, "%s of a container its fence removed", call)
	case c.again:
		m.breaks(rec, RuleStatusOrder, "%s of a container that is not made again yet (its last one is gone)", call)
	}
	c.inFlight = call
	c.intents++
	c.asked = true
}

// callEnded: the call was not carried out, so the container is no longer in flight.
func callEnded(m *Model, rec event.Record) {
	_, c := m.containerOf(rec)
	if c == nil {
		return
	}
	call := rec.Event.(*event.CallEnded).Call
	if c.inFlight != call {
		m.breaks(rec, RuleStatusOrder, "%s ended, but the call in flight is %q", call, c.inFlight)
	}
	c.inFlight = ""
}

// containerRolledBack: the runtime lost a create; only a container that never ran and has no
// start in flight may be made again, else it could run twice.
func containerRolledBack(m *Model, rec event.Record) {
	_, c := m.containerOf(rec)
	if c == nil {
		return
	}
	switch {
	case c.starts > 0 || c.inFlight != "":
		m.breaks(rec, RuleStartedTwice, "rolled back a container that ran or has a start in flight: made again, it may run twice")
	case c.known != event.StatusCreated || c.rolledBack:
		m.breaks(rec, RuleStatusOrder, "rolled back a container that is %s (rolled back before: %t)", c.known, c.rolledBack)
	}
	c.rolledBack, c.again, c.asked = true, true, false // a new container: no start of it asked
}

func containerTransitioned(m *Model, rec event.Record) {
	t, c := m.containerOf(rec)
	if c == nil {
		return
	}
	e := rec.Event.(*event.ContainerTransitioned)
	switch {
	case t.cleaned:
		m.breaks(rec, RuleTaskTwice, "container %s → %s in a cleaned task", e.From, e.To)
	case e.To == event.StatusRunning && c.starts > 0:
		m.breaks(rec, RuleStartedTwice, "RUNNING again: start outcome #%d", c.starts+1)
	case e.To == event.StatusRunning && c.fenced:
		m.breaks(rec, RuleStartAfterStopped, "RUNNING after its fence removed it")
	case e.To == event.StatusRunning && (c.known == event.StatusStopped || t.stopped()):
		m.breaks(rec, RuleStartAfterStopped, "RUNNING after the container (record %d) or its task (record %d) was STOPPED", c.stopSeq, t.stopSeq)
	case t.stopped():
		m.breaks(rec, RuleStatusOrder, "container %s → %s in a task STOPPED at record %d", e.From, e.To, t.stopSeq)
	case e.From != c.known:
		m.breaks(rec, RuleStatusOrder, "record says container %s → %s, but the container is %s", e.From, e.To, c.known)
	case e.To == event.StatusStopped && c.inFlight != "":
		m.breaks(rec, RuleStoppedWhileRunning, "container STOPPED while its %s is in flight", c.inFlight)
	case c.inFlight != "" && e.To != event.StatusRunning:
		m.breaks(rec, RuleStatusOrder, "container %s → %s while its %s is in flight", e.From, e.To, c.inFlight)
	case e.From == event.StatusCreated && e.To == event.StatusCreated:
		if !c.again {
			m.breaks(rec, RuleStatusOrder, "CREATED again without a rolled-back create or a fence to make it again")
		}
	case e.To.Rank() <= e.From.Rank() || e.To.Rank() > event.StatusStopped.Rank():
		m.breaks(rec, RuleStatusOrder, "container %s → %s", e.From, e.To)
	}
	if e.To == event.StatusRunning {
		c.starts++
	}
	c.inFlight, c.again = "", false
	if e.From != e.To && e.To.Reportable() {
		m.queue(rec, subject{rec.Task, rec.Container}, e.To, false)
		if e.To == event.StatusStopped {
			c.stopSeq = rec.Seq
			if (c.essential || e.StopsTask) && t.stopping == "" {
				t.stopping = "container " + rec.Container + " STOPPED at record " + strconv.FormatUint(rec.Seq, 10)
			}
		}
	}
	c.known = e.To
}

func taskTransitioned(m *Model, rec event.Record) {
	t := m.taskOf(rec)
	if t == nil {
		return
	}
	e := rec.Event.(*event.TaskTransitioned)
	switch {
	case t.cleaned:
		m.breaks(rec, RuleTaskTwice, "task %s → %s after it was cleaned", e.From, e.To)
	case e.From != t.known:
		m.breaks(rec, RuleStatusOrder, "record says task %s → %s, but the task is %s", e.From, e.To, t.known)
	case !e.To.Reportable() || e.To.Rank() <= e.From.Rank():
		m.breaks(rec, RuleStatusOrder, "task %s → %s", e.From, e.To)
	}
	if e.To == event.StatusStopped {
		for _, name := range t.names {
			c := t.containers[name]
			switch {
			case c.known == event.StatusRunning || c.inFlight != "":
				m.breaks(rec, RuleStoppedWhileRunning, "task STOPPED while container %s is %s (in flight: %q)", name, c.known, c.inFlight)
			case c.known != event.StatusStopped:
				m.breaks(rec, RuleTaskStoppedFirst, "task STOPPED while container %s is %s", name, c.known)
			}
		}
		t.stopSeq = rec.Seq
	}
	t.known = e.To
	if e.To.Reportable() {
		m.queue(rec, subject{task: rec.Task}, e.To, false)
	}
}
