package model

// The mapping from journal records to the model's steps: every record type the event package
// declares has its entry here (steps_test.go fails on a new type without one), so no record
// passes the model unread. A type that changes nothing the model checks maps to none.

import (
	"strconv"

	"github.com/agentd/agentd/internal/event"
)

type step func(*Model, event.Record)

// none is the step of a record that holds history for people, not protocol state: a
// snapshot or compaction mark, a failed report attempt, images collected, a refusal by the
// projection (the refused record itself was never journaled), a clean stop.
func none(*Model, event.Record) {}

var steps = map[event.Type]step{
	event.TypeAgentStarted:          agentStarted,
	event.TypeAgentStopped:          none,
	event.TypePayloadReceived:       payloadReceived,
	event.TypeTaskAdded:             taskAdded,
	event.TypeTaskRejected:          taskRejected,
	event.TypeTaskResent:            taskResent,
	event.TypeDesiredChanged:        desiredChanged,
	event.TypeContainerTransitioned: containerTransitioned,
	event.TypeContainerRolledBack:   containerRolledBack,
	event.TypeCallStarted:           callStarted,
	event.TypeCallEnded:             callEnded,
	event.TypeHealthChanged:         healthChanged,
	event.TypeTaskTransitioned:      taskTransitioned,
	event.TypeChangesSettled:        changesSettled,
	event.TypeReportAttempted:       reportAttempted,
	event.TypeStoppedAcked:          stoppedAcked,
	event.TypeCleanupStarted:        cleanupStarted,
	event.TypeContainerRemoved:      containerRemoved,
	event.TypeTaskCleaned:           taskCleaned,
	event.TypeCompactionDone:        compactionDone,
	event.TypeSnapshotTaken:         none,
	event.TypeImageRemoved:          none,
	event.TypeImageReleased:         none,
	event.TypeRecordRefused:         none,
}

func agentStarted(m *Model, rec event.Record) {
	if e := rec.Event.(*event.AgentStarted); m.journalID == "" {
		m.journalID = e.JournalID
	}
}

// payloadReceived: a payload is applied once; a re-send of one the journal holds is only
// acknowledged again (PROTOCOL.md §2), unless compaction forgot it.
func payloadReceived(m *Model, rec event.Record) {
	id := rec.Event.(*event.PayloadReceived).MessageID
	if at, ok := m.payloads[id]; ok {
		m.breaks(rec, RulePayloadTwice, "message %q was received at record %d", id, at)
		return
	}
	m.payloads[id] = rec.Seq
}

// newTask refuses an ARN the journal holds, live or tombstoned: a task never runs twice.
func (m *Model) newTask(rec event.Record) bool {
	if t, ok := m.tasks[rec.Task]; ok {
		state := "live"
		if t.cleaned {
			state = "cleaned"
		}
		m.breaks(rec, RuleTaskTwice, "task %q is assigned again while %s", rec.Task, state)
		return false
	}
	return true
}

func taskAdded(m *Model, rec event.Record) {
	if !m.newTask(rec) {
		return
	}
	e := rec.Event.(*event.TaskAdded)
	t := &task{desired: e.Desired, known: event.StatusNone, containers: map[string]*container{}}
	for _, spec := range e.Containers {
		t.containers[spec.Name] = &container{known: event.StatusNone, essential: spec.Essential}
		t.names = append(t.names, spec.Name)
	}
	if e.Desired == event.StatusStopped {
		t.stopping = "desired STOPPED on arrival"
	}
	m.tasks[rec.Task] = t
}

// taskRejected: a task that broke a rule exists from then on as STOPPED, reported as such,
// with nothing of it run.
func taskRejected(m *Model, rec event.Record) {
	if !m.newTask(rec) {
		return
	}
	m.tasks[rec.Task] = &task{desired: event.StatusStopped, known: event.StatusStopped, containers: map[string]*container{}, stopSeq: rec.Seq}
	m.queue(rec, subject{task: rec.Task}, event.StatusStopped, false)
}

// taskResent names a task the journal holds; after a compaction it may be one whose history
// was cut (its tombstone is in a snapshot).
func taskResent(m *Model, rec event.Record) {
	if m.tasks[rec.Task] == nil && len(m.gaps) == 0 {
		m.breaks(rec, RuleUnknownSubject, "re-sent task %q was never assigned", rec.Task)
	}
}

func desiredChanged(m *Model, rec event.Record) {
	t := m.taskOf(rec)
	if t == nil {
		return
	}
	to := rec.Event.(*event.DesiredChanged).To
	if to.Rank() <= t.desired.Rank() {
		m.breaks(rec, RuleStatusOrder, "desired status moves back or stays: %s → %s", t.desired, to)
		return
	}
	t.desired = to
	if to == event.StatusStopped && t.stopping == "" {
		t.stopping = "desired STOPPED at record " + strconv.FormatUint(rec.Seq, 10)
	}
}

func healthChanged(m *Model, rec event.Record) {
	if rec.Container == "" {
		if m.taskOf(rec) != nil {
			m.queue(rec, subject{task: rec.Task}, "", true)
		}
		return
	}
	if t, _ := m.containerOf(rec); t != nil {
		m.queue(rec, subject{rec.Task, rec.Container}, "", true)
	}
}

// compactionDone forgets tombstones and message ids past their retention: after it, such a
// task or payload may come again as new.
func compactionDone(m *Model, rec event.Record) {
	e := rec.Event.(*event.CompactionDone)
	for _, arn := range e.Tasks {
		if t := m.tasks[arn]; t != nil && !t.cleaned {
			m.breaks(rec, RuleCleanupBeforeSettled, "compaction forgets task %q, which was never cleaned", arn)
			continue
		}
		delete(m.tasks, arn)
	}
	for _, id := range e.Messages {
		delete(m.payloads, id)
	}
}
