package engine

import (
	"context"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// SnapshotInterval is how many records pass between snapshots: at least every, and at least
// four records for each task and tombstone the snapshot holds — so writing snapshots never
// costs more than the history they save replaying, however much state a host keeps.
func SnapshotInterval(st *fsm.State, every uint64) uint64 {
	return max(every, 4*uint64(len(st.Tasks)+len(st.Tombstones)))
}

// upkeep is the journal's upkeep: where the last snapshot stands. It guards that a snapshot
// comes every SnapshotInterval records (one compaction at a time is the node's: Ready.Compact).
type upkeep struct {
	snapSeq uint64 // the newest snapshot's sequence number
}

// pendingSnapshot is a snapshot the burst commits with its records.
type pendingSnapshot struct {
	at   uint64 // the projection's state after this record
	data []byte // its stored form (journal.PackSnapshot)
}

// snapshotIfDue, at the end of a burst, encodes the projection once enough records have
// passed since the last snapshot, so a restart replays only the tail, and records its
// snapshot_taken in the burst: the snapshot, that record and the burst's other records go in
// the burst's one commit (doc.go), both or neither, numbered like every other record.
func (e *Engine) snapshotIfDue() *pendingSnapshot {
	if e.st.LastSeq-e.upkeep.snapSeq < SnapshotInterval(e.st, e.cfg.SnapshotEvery) {
		return nil
	}
	at := e.st.LastSeq
	// Compressed as it is encoded: the snapshot is never held whole (PackSnapshot).
	data, size, err := journal.PackSnapshot(e.st.WriteSnapshot)
	if err != nil {
		e.log.Error().Err(err).Msg("cannot encode a snapshot")
		return nil
	}
	n := len(e.node.Ready().Records)
	_ = e.node.Step(e.clock.Now(), fsm.OwnRecord{Event: &event.SnapshotTaken{AtSeq: at, Bytes: int(size)}})
	if len(e.node.Ready().Records) == n {
		return nil // refused (quarantine.go): no record, no snapshot
	}
	return &pendingSnapshot{at: at, data: data}
}

// planCompaction is, after a snapshot, the compaction the node plans over the journal's
// facts (nil: none). The deletions run on the executor in commits of their own, so appends
// wait at most one short commit; the compaction_done record follows as an input.
func (e *Engine) planCompaction() *CompactionPlan {
	if e.cfg.Retention < 0 && e.cfg.JournalMaxBytes <= 0 {
		return nil
	}
	now := e.clock.Now()
	f, err := journalFacts(e.j, now, e.cfg.Retention, e.upkeep.snapSeq, e.cfg.JournalMaxBytes)
	if err != nil {
		e.log.Warn().Err(err).Msg("compaction skipped")
		return nil
	}
	_ = e.node.Step(now, fsm.SnapshotCommitted{Facts: f})
	p := e.node.Ready().Compact
	if p == nil {
		return nil // one runs
	}
	plan := CompactionPlan{*p}
	if plan.OverBudget != "" {
		e.setHealth(HealthJournalBudget, plan.OverBudget)
	} else if plan.InUse > 0 || e.cfg.JournalMaxBytes > 0 {
		e.clearHealth(HealthJournalBudget)
	}
	if len(plan.Early) > 0 {
		e.log.Warn().Int("tasks", len(plan.Early)).Int64("in_use", plan.InUse).Int64("journal_max_bytes", e.cfg.JournalMaxBytes).
			Msg("journal past its budget: dropping cleaned tasks' history before their retention ends (their tombstones stay)")
	}
	if plan.Empty() {
		return nil
	}
	return &plan
}

// handleCompact journals a finished compaction's record.
func (e *Engine) handleCompact(now time.Time, in CompactInput) {
	if in.Err != nil {
		_ = e.node.Step(now, fsm.CompactionFinished{}) // none runs now
		e.log.Warn().Err(in.Err).Msg("compaction failed; the next snapshot tries again")
		return
	}
	// Lost with a failed commit, the next compaction repeats it (the records are gone already).
	_ = e.node.Step(now, fsm.CompactionFinished{Done: in.Done})
	e.coreHealth() // refusals past the retention are forgotten
	e.metrics.droppedEarly.Add(float64(len(in.Done.Early)))
	e.log.Info().Int("records", in.Done.Records).Int("tasks", len(in.Done.Tasks)).Int("messages", len(in.Done.Messages)).Int("histories_dropped_early", len(in.Done.Early)).Msg("journal compacted")
}

// compaction is the executor's work for one compaction.
func (e *Engine) compaction(plan CompactionPlan) func() Input {
	j := e.j
	return func() Input {
		res, err := j.Compact(context.Background(), plan.UpTo, plan.Drop)
		return CompactInput{Done: plan.Done(res.Records), Err: err}
	}
}
