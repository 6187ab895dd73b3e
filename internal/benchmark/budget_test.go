package benchmark

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/engine"
	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// budgetChurn keeps far more history than its budget: a retention longer than the run (1000 s of
// virtual time) of tasks with long histories (114 records each), a budget of 3 MiB.
func budgetChurn(maxBytes int64) churnConfig {
	return churnConfig{SnapshotEvery: 5000, Retention: 1000 * time.Second, SizeEvery: 10000, Keep: true, MaxBytes: maxBytes, Resends: 100}
}

// A journal driven past --journal-max-bytes stays within the budget and one compaction's slack
// (the records of one snapshot interval and the snapshots kept): the oldest cleaned tasks'
// history goes before the retention ends, their tombstones stay. The earliest task, its history
// gone, is still recognised — in the projection the builder kept and in the one a restart
// rebuilds — so a re-send of it is never run; and `journal verify` finds nothing. Without the
// budget the same churn takes more than twice the budget.
func TestJournalStaysWithinItsBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 120k records twice")
	}
	t.Parallel()
	const budget = 3 << 20
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), journal.FileName)
	b, err := build(ctx, path, 120000, 100, budgetChurn(budget))
	if err != nil {
		t.Fatal(err)
	}
	unbounded, err := build(ctx, filepath.Join(t.TempDir(), journal.FileName), 120000, 100, budgetChurn(0))
	if err != nil {
		t.Fatal(err)
	}
	unbounded.j.Close()
	t.Logf("used bytes every 10k records: with a %d budget %v; without %v", budget, b.sizes, unbounded.sizes)
	// One compaction's slack: the cut stops at the older of the two snapshots kept, so the
	// records of two snapshot intervals (about 160 bytes each on disk) and the two snapshots.
	interval := int(engine.SnapshotInterval(b.st, 5000))
	snap, _ := b.st.Snapshot()
	slack := int64(2*interval*160 + 2*len(snap))
	if peak := slices.Max(unbounded.sizes); 2*peak < 3*(budget+slack) {
		t.Fatalf("without the budget the churn only reaches %d bytes (budget %d, slack %d): the test drives nothing past it", peak, budget, slack)
	}
	if peak := slices.Max(b.sizes); peak > budget+slack {
		t.Errorf("the journal reached %d bytes: more than its budget %d and one compaction's slack %d", peak, budget, slack)
	} else {
		t.Logf("peak %d: budget %d, slack %d", peak, budget, slack)
	}

	first := "arn:agentd:task/churn-00000000"
	ts := b.st.Tombstones[first]
	if ts == nil || !ts.HistoryDropped() {
		t.Fatalf("the first cleaned task's tombstone is %+v; want it kept, its history dropped early", ts)
	}
	if err := b.j.Iterate(1, func(r event.Record) error {
		if r.Task == first {
			t.Errorf("record %d of %s is still in the journal", r.Seq, first)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := forensics.Verify(b.j)
	if err != nil || len(rep.Findings) > 0 {
		t.Errorf("journal verify: %v %+v", err, rep.Findings)
	}
	b.j.Close()
	_, st, err := ready(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(map[string]any{"arn": first, "desired_status": "RUNNING", "containers": []map[string]any{{"name": "app", "image": "registry.example/web:3"}}})
	v := st.Step(time.Now(), fsm.PayloadArrived{MessageID: "m-resent", Tasks: []json.RawMessage{raw}})
	for _, r := range v.Records {
		if _, added := r.Event.(*event.TaskAdded); added {
			t.Fatalf("re-sent %s, its history dropped early, is added again: %+v", first, v.Records)
		}
	}
	if len(v.Records) != 2 || v.Records[1].Event.Type() != event.TypeTaskResent {
		t.Fatalf("re-sent %s comes to %+v; want payload_received, task_resent", first, v.Records)
	}
}
