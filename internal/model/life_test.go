package model_test

// A task's life as the agent journals it, written symbolically (records named by labels, a
// settle naming the records whose changes it settles), and the mutations that break one rule
// each: the model reads the result from a real bbolt journal written by the journal's appender.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

const journalID = "j1"

type entry struct {
	label           string
	task, container string
	ev              event.Event
	settles         []string // changes_settled: the records whose changes the control plane accepted
	acks            string   // stopped_acked: the record of the task's STOPPED
}

type life []entry

func ct(from, to event.Status) *event.ContainerTransitioned {
	return &event.ContainerTransitioned{From: from, To: to}
}

func tt(from, to event.Status) *event.TaskTransitioned {
	return &event.TaskTransitioned{From: from, To: to}
}

// cleanLife is one task with one container, run, stopped, reported, settled and cleaned.
func cleanLife() life {
	const a, app = "task/a", "app"
	return life{
		{label: "started", ev: &event.AgentStarted{AgentID: "agent-1", JournalID: journalID}},
		{label: "payload", ev: &event.PayloadReceived{MessageID: "m1"}},
		{label: "added", task: a, ev: &event.TaskAdded{MessageID: "m1", Desired: event.StatusRunning, Containers: []event.ContainerSpec{{Name: app, Image: "web:1", Essential: true}}}},
		{label: "pulled", task: a, container: app, ev: ct(event.StatusNone, event.StatusPulled)},
		{label: "created", task: a, container: app, ev: &event.ContainerTransitioned{From: event.StatusPulled, To: event.StatusCreated, RuntimeID: "r1"}},
		{label: "start", task: a, container: app, ev: &event.CallStarted{Call: "start"}},
		{label: "running", task: a, container: app, ev: ct(event.StatusCreated, event.StatusRunning)},
		{label: "task running", task: a, ev: tt(event.StatusNone, event.StatusRunning)},
		{label: "settle run", settles: []string{"running", "task running"}},
		{label: "stopped", task: a, container: app, ev: ct(event.StatusRunning, event.StatusStopped)},
		{label: "task stopped", task: a, ev: tt(event.StatusRunning, event.StatusStopped)},
		{label: "settle stop", settles: []string{"stopped", "task stopped"}},
		{label: "acked", task: a, acks: "task stopped"},
		{label: "cleanup", task: a, ev: &event.CleanupStarted{}},
		{label: "removed", task: a, container: app, ev: &event.ContainerRemoved{RuntimeID: "r1"}},
		{label: "cleaned", task: a, ev: &event.TaskCleaned{}},
	}
}

func (l life) index(label string) int {
	i := slices.IndexFunc(l, func(e entry) bool { return e.label == label })
	if i < 0 {
		panic("no record labelled " + label)
	}
	return i
}

// moveAfter moves the record labelled label to just after the one labelled after.
func (l life) moveAfter(label, after string) life {
	e := l[l.index(label)]
	out := slices.Delete(slices.Clone(l), l.index(label), l.index(label)+1)
	i := out.index(after)
	return slices.Insert(out, i+1, e)
}

// insertAfter puts entries just after the record labelled after.
func (l life) insertAfter(after string, es ...entry) life {
	return slices.Insert(slices.Clone(l), l.index(after)+1, es...)
}

// replace puts e in the place of the record labelled label.
func (l life) replace(label string, e entry) life {
	out := slices.Clone(l)
	out[l.index(label)] = e
	return out
}

// records resolves labels to sequence numbers (the position, from 1) and change ids; a settle
// naming a record the life no longer holds leaves it out.
func (l life) records() []event.Record {
	seq := map[string]uint64{}
	for i, e := range l {
		seq[e.label] = uint64(i + 1)
	}
	id := func(label string) string { return fmt.Sprintf("c-%s-%d", journalID, seq[label]) }
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	out := make([]event.Record, len(l))
	for i, e := range l {
		ev := e.ev
		switch {
		case e.settles != nil:
			s := &event.ChangesSettled{}
			for _, label := range e.settles {
				if _, ok := seq[label]; ok {
					s.Accepted = append(s.Accepted, id(label))
				}
			}
			ev = s
		case e.acks != "":
			ev = &event.StoppedAcked{ChangeID: id(e.acks)}
		}
		out[i] = event.Record{Time: at.Add(time.Duration(i) * time.Second), Task: e.task, Container: e.container, Event: ev}
	}
	return out
}

// write journals the life with the journal's own appender, one record a commit, as the agent
// does, and returns the journal reopened read-only.
func (l life) write(t *testing.T) *journal.Journal {
	t.Helper()
	path := filepath.Join(t.TempDir(), journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range l.records() {
		if _, err := j.Append(context.Background(), rec); err != nil {
			t.Fatalf("append %s: %v", rec.Event.Type(), err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if j, err = journal.Open(path, journal.Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}
