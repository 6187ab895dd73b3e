package engine

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// maxCompactTasks bounds the tasks (and message ids) one compaction forgets.
const maxCompactTasks = 5000

// CompactionPlan is what one compaction drops: the history of tasks cleaned longer ago than
// the retention, and records without a task older than it, up to a snapshot's sequence
// number. The compaction_done record it makes forgets those tombstones and message ids.
type CompactionPlan struct {
	UpTo     uint64   // the snapshot covering the cut
	Cut      uint64   // records without a task at or before this go
	Tasks    []string // tombstoned tasks whose whole history goes
	Messages []string // message ids forgotten
	drop     map[string]bool
}

// PlanCompaction decides a compaction from the projection (it reads the journal only to turn
// the retention horizon into a sequence number). Oldest tombstones first, a bounded number a
// round, so one compaction_done record stays small even after a long downtime.
func PlanCompaction(st *fsm.State, j *journal.Journal, now time.Time, retention time.Duration, upTo uint64) (CompactionPlan, error) {
	p := CompactionPlan{UpTo: upTo, drop: map[string]bool{}}
	horizon := now.Add(-retention)
	for arn, ts := range st.Tombstones {
		if ts.CleanedAt.Before(horizon) {
			p.Tasks = append(p.Tasks, arn)
		}
	}
	cut, err := j.SeqAt(horizon)
	if err != nil {
		return p, err
	}
	p.Cut = min(cut, upTo)
	for m, seq := range st.Messages {
		if seq <= p.Cut {
			p.Messages = append(p.Messages, m)
		}
	}
	slices.SortFunc(p.Tasks, func(a, b string) int {
		return st.Tombstones[a].CleanedAt.Compare(st.Tombstones[b].CleanedAt)
	})
	p.Tasks = p.Tasks[:min(len(p.Tasks), maxCompactTasks)]
	slices.Sort(p.Tasks)
	slices.Sort(p.Messages)
	p.Messages = p.Messages[:min(len(p.Messages), maxCompactTasks)]
	for _, t := range p.Tasks {
		p.drop[t] = true
	}
	return p, nil
}

// Empty reports whether there is nothing to forget.
func (p CompactionPlan) Empty() bool { return len(p.Tasks) == 0 && len(p.Messages) == 0 }

// Drop is the compaction's predicate. A task's records go with its task, whatever their age,
// so a kept task's history is always whole. agent_started records stay: they are few, and a
// replay from the start needs the journal id they carry. Other records without a task
// (payloads as received, failed report attempts, snapshot and compaction marks) change no
// task's state: only their age counts.
func (p CompactionPlan) Drop(h journal.Header) bool {
	switch {
	case h.Task != "":
		return p.drop[h.Task]
	case h.Type == event.TypeAgentStarted:
		return false
	}
	return h.Seq <= p.Cut
}

// Done is the record that closes the compaction.
func (p CompactionPlan) Done(records int) *event.CompactionDone {
	return &event.CompactionDone{UpToSeq: p.UpTo, Tasks: p.Tasks, Messages: p.Messages, Records: records}
}
