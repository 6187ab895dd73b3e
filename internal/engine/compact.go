package engine

import (
	"time"

	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// CompactionPlan is a compaction the core planned (fsm.State.PlanCompaction), as the engine
// runs it on the journal file.
type CompactionPlan struct{ fsm.CompactionPlan }

// Drop is the plan's predicate over the journal's records (fsm.CompactionPlan.Drops).
func (p CompactionPlan) Drop(h journal.Header) bool { return p.Drops(h.Task, h.Type, h.Seq) }

// PlanCompaction reads what the core's plan needs of the journal — the snapshots kept, the
// record at the retention horizon, the bytes in use under a budget — and has the core plan
// the compaction (fsm.State.PlanCompaction). newest is the snapshot just taken.
func PlanCompaction(st *fsm.State, j *journal.Journal, now time.Time, retention time.Duration, newest uint64, maxBytes int64) (CompactionPlan, error) {
	f, err := journalFacts(j, now, retention, newest, maxBytes)
	if err != nil {
		return CompactionPlan{}, err
	}
	return CompactionPlan{st.PlanCompaction(now, fsm.CompactionPolicy{Retention: retention, MaxBytes: maxBytes}, f)}, nil
}

// journalFacts reads what planning a compaction needs of the journal file.
func journalFacts(j *journal.Journal, now time.Time, retention time.Duration, newest uint64, maxBytes int64) (fsm.JournalFacts, error) {
	f := fsm.JournalFacts{Newest: newest}
	var err error
	if f.Snapshots, err = j.SnapshotSeqs(); err != nil {
		return f, err
	}
	if retention >= 0 {
		if f.HorizonSeq, err = j.SeqAt(now.Add(-retention)); err != nil {
			return f, err
		}
	}
	if maxBytes > 0 {
		if f.InUse, err = j.InUse(); err != nil {
			return f, err
		}
		if f.SnapshotBytes, err = j.SnapshotBytes(); err != nil {
			return f, err
		}
	}
	return f, nil
}
