package journal_test

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// Issue 13 item 7: after a compaction the writer's cache of per-task index ids was restored by
// the very commit meant to reset it, so a task seen again after its index entry was compacted
// away (a re-sent ARN) was indexed under an id no task pointed to: `journal verify` reported
// its records missing from the index and `journal dump --task` did not show them, on a journal
// only the agent had written. Whatever the layout, a task's records must all be found, and
// verify must find nothing wrong, after compactions and appends of any order.
func TestTaskRecordsAreWholeAfterCompactionAndReuse(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j := open(t, path)
	ctx := context.Background()
	i := 0
	add := func(task string) {
		t.Helper()
		i++
		if _, err := j.Append(ctx, transition(task, "app", event.StatusNone, event.StatusPulled, i)); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 10; n++ {
		add("task/old")
		add("task/kept")
	}
	at := j.LastSeq()
	if _, err := j.SaveSnapshot(ctx, at, []byte("s"), event.Record{Time: t0, Event: &event.SnapshotTaken{AtSeq: at}}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Compact(ctx, at, func(h journal.Header) bool { return h.Task == "task/old" }); err != nil {
		t.Fatal(err)
	}
	// The same ARN again (the control plane re-sent it), a new task, and the kept one.
	for n := 0; n < 3; n++ {
		add("task/old")
		add("task/new")
		add("task/kept")
	}
	check := func(j *journal.Journal) {
		t.Helper()
		for task, want := range map[string]int{"task/old": 3, "task/new": 3, "task/kept": 13} {
			var got int
			if err := j.TaskRecords(task, func(r event.Record) error {
				if r.Task != task {
					t.Fatalf("record %d of %s returned for %s", r.Seq, r.Task, task)
				}
				got++
				return nil
			}); err != nil || got != want {
				t.Errorf("%s: %d records found (%v); want %d", task, got, err, want)
			}
		}
		res, err := j.Verify(nil)
		if err != nil || len(res.Problems) != 0 {
			t.Errorf("verify of a journal only the journal wrote: %v %v", res.Problems, err)
		}
	}
	check(j)
	j.Close()
	check(open(t, path))
}

// A schema-1 journal (with the per-task index buckets) opened for writing is upgraded in place:
// the index goes, every record stays and is found by task, and the file then says schema 2. A
// read-only open leaves it as it is.
func TestSchema1JournalIsUpgradedOnWritableOpen(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journals", "crash.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), journal.FileName)
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	schema := func() (uint32, bool) {
		t.Helper()
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var v uint32
		var index bool
		_ = db.View(func(tx *bolt.Tx) error {
			v = binary.BigEndian.Uint32(tx.Bucket([]byte("meta")).Get([]byte("schema")))
			index = tx.Bucket([]byte("by-task")) != nil
			return nil
		})
		return v, index
	}
	if v, index := schema(); v != 1 || !index {
		t.Fatalf("fixture is schema %d (index %v); want a schema-1 journal with its index", v, index)
	}
	ro, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	before := collect(t, ro, 1)
	ro.Close()
	if v, _ := schema(); v != 1 {
		t.Fatalf("a read-only open changed the schema to %d", v)
	}
	j := open(t, path)
	after := collect(t, j, 1)
	if len(after) != len(before) || len(after) == 0 {
		t.Fatalf("%d records after the upgrade; want the %d before", len(after), len(before))
	}
	var n int
	if err := j.TaskRecords("task/crash-1", func(event.Record) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("task/crash-1 after the upgrade: %d records, %v", n, err)
	}
	if res, err := j.Verify(nil); err != nil || len(res.Problems) != 0 {
		t.Fatalf("verify after the upgrade: %v %v", res.Problems, err)
	}
	j.Close()
	if v, index := schema(); v != journal.SchemaVersion || index {
		t.Fatalf("after a writable open: schema %d, index kept %v; want schema %d without the index", v, index, journal.SchemaVersion)
	}
}
