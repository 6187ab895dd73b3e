package forensics_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/forensics"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/journal/journaltest"
)

// copyJournal gives a test a writable copy of a golden journal.
func copyJournal(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "journals", name+".db"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), journal.FileName)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Verify finds planted defects, each named with its sequence number and kind: a flipped byte,
// a deleted record, a cleanup without stopped-acked, a container started twice, and a sent
// status ahead of known — planted past the journal's checks (journaltest).
func TestVerifyNamesPlantedDefects(t *testing.T) {
	path := copyJournal(t, "dev")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, last, _ := j.Range()
	rec, err := j.Get(30) // to be planted with a flipped byte
	if err != nil {
		t.Fatal(err)
	}
	// A new task, stopped, cleaned without its STOPPED ever being settled.
	spec := []event.ContainerSpec{{Name: "app", Image: "x", Essential: true}}
	tr := func(from, to event.Status) *event.ContainerTransitioned {
		return &event.ContainerTransitioned{From: from, To: to}
	}
	tk := func(from, to event.Status) *event.TaskTransitioned {
		return &event.TaskTransitioned{From: from, To: to}
	}
	at := rec.Time
	plant := []event.Record{
		{Task: "task/planted", Event: &event.TaskAdded{Desired: event.StatusRunning, Containers: spec}},
		{Task: "task/planted", Container: "app", Event: tr("NONE", "PULLED")},
		{Task: "task/planted", Event: tk("NONE", "PULLED")},
		{Task: "task/planted", Container: "app", Event: tr("PULLED", "CREATED")},
		{Task: "task/planted", Event: tk("PULLED", "CREATED")},
		{Task: "task/planted", Container: "app", Event: tr("CREATED", "RUNNING")},
		{Task: "task/planted", Event: tk("CREATED", "RUNNING")},
		{Task: "task/planted", Container: "app", Event: tr("CREATED", "RUNNING")}, // started twice
		{Event: &event.ChangesSettled{Accepted: []string{"c-999999"}}},            // settles what was never made
		{Task: "task/planted", Container: "app", Event: tr("RUNNING", "STOPPED")},
		{Task: "task/planted", Event: tk("RUNNING", "STOPPED")},
		{Task: "task/planted", Event: &event.CleanupStarted{}}, // no stopped-acked
	}
	for i := range plant {
		plant[i].Time = at
	}
	if _, err := j.Append(ctx, plant...); err != nil {
		t.Fatal(err)
	}
	j.Close()
	// A flipped byte in record 30, and record 40 deleted: planted in the closed file.
	b, _ := journal.EncodeRecord(rec)
	b[len(b)/2] ^= 0x01
	if err := journaltest.PutRecord(path, 30, b); err != nil {
		t.Fatal(err)
	}
	if err := journaltest.DeleteRecord(path, 40); err != nil {
		t.Fatal(err)
	}
	j, closeJ, err := forensics.Open(ctx, forensics.Source{File: path})
	if err != nil {
		t.Fatal(err)
	}
	defer closeJ()
	rep, err := forensics.Verify(j)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		seq  uint64
		kind string
		text string
	}{
		{30, "record", "checksum mismatch"},
		{41, "record", "sequence gap: records 40..40 missing"},
		{last + 8, "illegal-transition", "container CREATED → RUNNING, but the container is RUNNING"},
		{last + 9, "sent-ahead-of-known", "c-999999"},
		{last + 12, "cleanup-before-stopped-acked", "cleanup of a task that is STOPPED"},
	}
	for _, w := range want {
		found := false
		for _, f := range rep.Findings {
			if f.Seq == w.seq && f.Kind == w.kind && strings.Contains(f.Detail, w.text) {
				found = true
			}
		}
		if !found {
			t.Errorf("verify did not report record %d as %s (%q); findings:\n%v", w.seq, w.kind, w.text, rep.Findings)
		}
	}
	// The two golden journals themselves are sound.
	for _, name := range []string{"dev", "crash"} {
		j, closeJ, err := forensics.Open(ctx, forensics.Source{File: filepath.Join("..", "..", "testdata", "journals", name+".db")})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := forensics.Verify(j)
		closeJ()
		if err != nil || len(rep.Findings) != 0 {
			t.Fatalf("%s: %v %v", name, rep.Findings, err)
		}
	}
}

// A journal a running agent holds: every subcommand explains instead of hanging.
func TestLockedJournalIsExplained(t *testing.T) {
	path := copyJournal(t, "dev")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	_, _, err = forensics.Open(context.Background(), forensics.Source{File: path})
	if err == nil || !strings.Contains(err.Error(), "locked by another agentd process (pid") || !strings.Contains(err.Error(), "--live") {
		t.Fatalf("open of a held journal: %v", err)
	}
}

// A record_refused (engine/quarantine.go) is what is left of a payload record the core made
// and the projection refused: `journal dump --type record_refused` prints it with its task,
// payload and reason, the task's timeline tells it, and verify accepts it.
func TestARefusedPayloadRecordIsDumpedAndTold(t *testing.T) {
	path := copyJournal(t, "dev")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) // after the golden journal
	if _, err := j.Append(context.Background(),
		event.Record{Time: at, Event: &event.PayloadReceived{MessageID: "m-17"}},
		event.Record{Time: at, Task: "task/lost", Event: &event.RecordRefused{MessageID: "m-17", Record: "task_added", Reason: "task without containers"}}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, closeJ, err := forensics.Open(context.Background(), forensics.Source{File: path})
	if err != nil {
		t.Fatal(err)
	}
	defer closeJ()

	types, err := forensics.ParseTypes("record_refused")
	if err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	if n, err := forensics.Dump(&dump, j, forensics.Filter{Types: types}, false); err != nil || n != 1 {
		t.Fatalf("dump --type record_refused: %d records, %v:\n%s", n, err, dump.String())
	}
	for _, want := range []string{"record_refused", "task/lost", "message=m-17 refused=task_added reason=\"task without containers\""} {
		if !strings.Contains(dump.String(), want) {
			t.Fatalf("dump does not say %q:\n%s", want, dump.String())
		}
	}
	tl, err := forensics.BuildTimeline(j, "task/lost")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	tl.WriteText(&text)
	if !strings.Contains(text.String(), "payload m-17 acknowledged, its task_added refused by the core") {
		t.Fatalf("timeline of task/lost:\n%s", text.String())
	}
	rep, err := forensics.Verify(j)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) > 0 {
		t.Fatalf("journal verify: %+v", rep.Findings)
	}
}
