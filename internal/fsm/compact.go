package fsm

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd/internal/event"
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
	// Early are cleaned tasks within the retention whose history goes because the journal
	// passed its budget, oldest cleaned first; their tombstones stay (event.CompactionDone.Early).
	Early []string
	// OverBudget says why the journal stays over its budget even with every cleaned task's
	// history gone: the live tasks' history alone needs more ("" when it fits).
	OverBudget string
	InUse      int64 // the journal's bytes in use when planned (0: no budget)
	// RefusedUpTo: the refusals past the retention go, the newest at this sequence number,
	// with their record_refused records (refused.go); never early, whatever the budget.
	RefusedUpTo uint64
	drop        map[string]bool
}

// JournalFacts is what planning a compaction needs to know of the journal file, read by the
// engine: the core reads no file.
type JournalFacts struct {
	Snapshots  []uint64 // the snapshots kept, ascending
	Newest     uint64   // the snapshot just taken
	HorizonSeq uint64   // the last record at or before the retention horizon (now − retention)
	InUse      int64    // bytes in use (read only under a budget)
	// SnapshotBytes is what the kept snapshots hold, stored (read only under a budget): they
	// stay whatever is dropped, so they are no task's history.
	SnapshotBytes int64
}

// CompactionPolicy is what an operator sets: how long cleaned tasks' history is kept (< 0:
// forever) and the journal's size limit (--journal-max-bytes; ≤ 0: none).
type CompactionPolicy struct {
	Retention time.Duration
	MaxBytes  int64
}

// budgetAim is how far below the budget an over-budget compaction aims: past it, cleaned
// tasks' histories are dropped before their retention ends, the oldest cleaned first, until
// an estimate of what they hold brings the journal to this share of the budget — so one
// compaction makes room for more than the next snapshot interval's records.
const budgetAim = 0.8

// PlanCompaction decides a compaction from the projection and what the journal holds; it is
// pure. Two rules keep recovery independent of what compaction did:
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
// the file and recovery grow with history. The compaction_done records this makes list at most
// the tombstones the snapshot before it holds in full, in records of bounded size (doneRecords).
//
// A budget adds the early drops; the time cut and the message ids forgotten stay the
// retention's, so every tombstone and payload id the guard needs stays.
func (s *State) PlanCompaction(now time.Time, pol CompactionPolicy, f JournalFacts) CompactionPlan {
	p := CompactionPlan{drop: map[string]bool{}}
	for _, seq := range f.Snapshots {
		if seq <= f.Newest {
			p.UpTo = seq // ascending: the first is the fallback
			break
		}
	}
	if p.UpTo == 0 {
		return p
	}
	if pol.Retention >= 0 { // negative: kept forever, only the budget drops history
		horizon := now.Add(-pol.Retention)
		p.Cut = min(f.HorizonSeq, p.UpTo)
		for arn, ts := range s.Tombstones {
			if ts.CleanedAt().Before(horizon) && ts.CleanSeq <= p.Cut {
				p.Tasks = append(p.Tasks, arn)
			}
		}
		p.RefusedUpTo = s.refusedUpTo(horizon, p.Cut)
	}
	held := map[string]bool{} // payloads that hold a live task: a re-send of one must stay recognised
	for _, t := range s.Tasks {
		for _, m := range t.Messages {
			held[m] = true
		}
	}
	for m, seq := range s.Messages {
		if seq <= p.Cut && !held[m] {
			p.Messages = append(p.Messages, m)
		}
	}
	slices.Sort(p.Tasks)
	slices.Sort(p.Messages)
	for _, t := range p.Tasks {
		p.drop[t] = true
	}
	if pol.MaxBytes > 0 {
		p.overBudget(s, f.InUse, f.SnapshotBytes, pol.MaxBytes)
	}
	return p
}

// overBudget plans the early drops when the journal's bytes in use pass maxBytes. What a
// task's history holds is estimated as the bytes in use, less the snapshots', over the tasks
// that have one (live, or tombstoned with their history): records without a task go with the
// oldest dropped. The snapshots stay whatever is dropped — they hold every tombstone until its
// retention ends — so they are not counted as history; when the tombstones are what keeps the
// journal over its budget, health says so (issue 25: it blamed the live tasks).
func (p *CompactionPlan) overBudget(s *State, inUse, snaps, maxBytes int64) {
	p.InUse = inUse
	if inUse <= maxBytes {
		return
	}
	snaps = min(snaps, inUse)
	type cand struct {
		arn string
		seq uint64
	}
	var cands []cand
	withHistory := len(s.Tasks)
	for arn, ts := range s.Tombstones {
		if ts.HistoryDropped() || p.drop[arn] {
			continue
		}
		withHistory++
		if ts.CleanSeq <= p.UpTo {
			cands = append(cands, cand{arn, ts.CleanSeq})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.seq, b.seq) })
	perTask := (inUse - snaps) / int64(max(withHistory, 1))
	need := inUse - int64(budgetAim*float64(maxBytes))
	n := min(len(cands), int((need+perTask-1)/max(perTask, 1)))
	for _, c := range cands[:n] {
		p.Early = append(p.Early, c.arn)
		p.drop[c.arn] = true
	}
	if n > 0 {
		p.Cut = max(p.Cut, min(cands[n-1].seq, p.UpTo)) // their payloads and reports go with them
	}
	if left := inUse - int64(n)*perTask; n == len(cands) && left > maxBytes {
		p.OverBudget = overBudgetProblem(s, inUse, left, snaps, perTask, maxBytes)
	}
	slices.Sort(p.Early)
}

// overBudgetProblem names what keeps the journal over its budget once every cleaned task's
// history it may drop is gone (left bytes): the live tasks' own history (perTask each), or
// the rest — the snapshots and the records since the older one, which compaction never cuts.
// The rest grows with the tombstones: every snapshot holds them all, and snapshots come every
// 4 records per task or tombstone held (engine.SnapshotInterval), so a tombstone kept until
// its retention ends costs about a kilobyte of journal, not its snapshot bytes alone.
func overBudgetProblem(s *State, inUse, left, snaps, perTask, maxBytes int64) string {
	live := int64(len(s.Tasks)) * perTask
	msg := fmt.Sprintf("journal holds %d bytes, %d after dropping every cleaned task's history it may: more than --journal-max-bytes %d; the %d live tasks' history is about %d, the rest (%d in snapshots, the records since the older one) grows with the %d tombstones",
		inUse, left, maxBytes, len(s.Tasks), live, snaps, len(s.Tombstones))
	if live <= maxBytes && len(s.Tombstones) >= len(s.Tasks) {
		return msg + "; the tombstones need more, and they stay until --retention ends: shorten --retention or raise --journal-max-bytes"
	}
	return msg + "; the live tasks need more"
}

// Empty reports whether there is nothing to forget.
func (p CompactionPlan) Empty() bool {
	return len(p.Tasks) == 0 && len(p.Messages) == 0 && len(p.Early) == 0 && p.RefusedUpTo == 0
}

// Drops is the compaction's predicate over a record's task, type and sequence number. A
// task's records go with its task, whatever their age, so a kept task's history is always
// whole. agent_started records stay: they are few, and a replay from the start needs the
// journal id they carry. Other records without a task (payloads as received, failed report
// attempts, snapshot and compaction marks) change no task's state: only their age counts.
// A record_refused changes no task's state either, whatever its subject: it goes with its
// refusal, at the end of the retention (or with its task's history).
func (p CompactionPlan) Drops(task string, typ event.Type, seq uint64) bool {
	switch {
	case typ == event.TypeRecordRefused:
		return p.drop[task] || seq <= p.RefusedUpTo
	case task != "":
		return p.drop[task]
	case typ == event.TypeAgentStarted:
		return false
	}
	return seq <= p.Cut
}

// Done is the record that closes the compaction.
func (p CompactionPlan) Done(records int) *event.CompactionDone {
	return &event.CompactionDone{UpToSeq: p.UpTo, Tasks: p.Tasks, Messages: p.Messages, Early: p.Early, Records: records, RefusedUpTo: p.RefusedUpTo}
}

// doneRecordBytes bounds a compaction_done record as the journal stores it (its body, and an
// envelope of at most 40 bytes): under half a 4 KiB page with bbolt's per-value overhead, so
// two fit one page. As one record, a round's list of forgotten tasks was 236 KB at 7,160
// tasks (the recovery bench's round at 10k live tasks): bbolt stores a value in one run of
// contiguous pages, here 58 every round, which the pages compaction frees (a few here, a few
// there) held less and less often, so the file grew by that run while megabytes of free pages
// went unused (issue 25: the disk row, 35.6 → 40.6 MB over 10M records). Pieces of this size
// ask only for single pages, which any freed page serves.
const doneRecordBytes = 2000

// doneFixedBytes is what a compaction_done record holds besides its names, at most: the
// envelope, and the body's keys, brackets and three numbers of up to 20 digits.
const doneFixedBytes = 40 + 160

// doneRecords is the compaction_done records that close a compaction: done's lists, in order,
// cut into records of at most doneRecordBytes stored (a single name longer than that gets a
// record of its own). Journaled together in one commit and applied one after another, they
// forget what done forgets. Each carries the cut; the first the count of records removed and
// the refusals forgotten.
func doneRecords(done *event.CompactionDone) []event.Record {
	cur := &event.CompactionDone{UpToSeq: done.UpToSeq, Records: done.Records, RefusedUpTo: done.RefusedUpTo}
	out := []event.Record{{Event: cur}}
	size, names := doneFixedBytes, 0
	for _, list := range []struct {
		names []string
		into  func(*event.CompactionDone) *[]string
	}{
		{done.Tasks, func(d *event.CompactionDone) *[]string { return &d.Tasks }},
		{done.Messages, func(d *event.CompactionDone) *[]string { return &d.Messages }},
		{done.Early, func(d *event.CompactionDone) *[]string { return &d.Early }},
	} {
		for _, name := range list.names {
			quoted, _ := json.Marshal(name) // a string always encodes
			n := len(quoted) + 1            // and its comma
			if names > 0 && size+n > doneRecordBytes {
				cur = &event.CompactionDone{UpToSeq: done.UpToSeq}
				out = append(out, event.Record{Event: cur})
				size, names = doneFixedBytes, 0
			}
			into := list.into(cur)
			*into = append(*into, name)
			size += n
			names++
		}
	}
	return out
}
