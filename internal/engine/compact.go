package engine

import (
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// CompactionPlan is what one compaction drops: the history of tasks cleaned longer ago than
// the retention, and records without a task older than it, up to the fallback snapshot's
// sequence number. The compaction_done record it makes forgets those tombstones and message ids —
// but never the id of a payload that holds a live task: the control plane may re-send such a
// payload, and its tasks cleaned long ago must then not run again (issue 13, item 3).
type CompactionPlan struct {
	UpTo     uint64   // the cut goes no further than this: the oldest snapshot kept (the fallback)
	Cut      uint64   // records without a task at or before this go
	Tasks    []string // tombstoned tasks whose whole history goes
	Messages []string // message ids forgotten
	drop     map[string]bool
}

// PlanCompaction decides a compaction from the projection (it reads the journal only to turn
// the retention horizon into a sequence number and to find the snapshots kept). newest is the
// snapshot just taken.
//
// Two rules keep recovery independent of what compaction did:
//
//   - The cut never passes the oldest snapshot the journal keeps, not just the newest: should
//     the newest prove damaged, recovery falls back to the older one and replays from there,
//     so every record after it must still be there. (Cutting up to the newest made a damaged
//     newest snapshot a crash-loop: replay from the fallback met tasks whose history was gone.)
//   - A task goes only if its whole history is at or before the cut (its cleaning record is),
//     so no task is ever left with half a history.
//
// Every tombstone past the retention goes in one round, however many: a fixed bound per round
// falls behind any churn that cleans more tasks than the bound between two snapshots, and then
// the file and recovery grow with history. The compaction_done record this makes lists at most
// the tombstones the snapshot before it holds in full, so it is never bigger than that snapshot.
func PlanCompaction(st *fsm.State, j *journal.Journal, now time.Time, retention time.Duration, newest uint64) (CompactionPlan, error) {
	p := CompactionPlan{drop: map[string]bool{}}
	kept, err := j.SnapshotSeqs()
	if err != nil {
		return p, err
	}
	for _, s := range kept {
		if s <= newest {
			p.UpTo = s // kept is ascending: the first is the fallback
			break
		}
	}
	if p.UpTo == 0 {
		return p, nil
	}
	horizon := now.Add(-retention)
	cut, err := j.SeqAt(horizon)
	if err != nil {
		return p, err
	}
	p.Cut = min(cut, p.UpTo)
	for arn, ts := range st.Tombstones {
		if ts.CleanedAt().Before(horizon) && ts.CleanSeq <= p.Cut {
			p.Tasks = append(p.Tasks, arn)
		}
	}
	held := map[string]bool{} // payloads that hold a live task: a re-send of one must stay recognised
	for _, t := range st.Tasks {
		for _, m := range t.Messages {
			held[m] = true
		}
	}
	for m, seq := range st.Messages {
		if seq <= p.Cut && !held[m] {
			p.Messages = append(p.Messages, m)
		}
	}
	slices.Sort(p.Tasks)
	slices.Sort(p.Messages)
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
