package journaltest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// What is planted is what the journal reads back, under the number it was planted at: fails
// when this package's idea of the layout (bucket, key) drifts from journal's.
func TestPlantedRecordsAreTheJournals(t *testing.T) {
	path := filepath.Join(t.TempDir(), journal.FileName)
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for range 3 {
		if _, err := j.Append(context.Background(), event.Record{Time: at, Task: "task/a", Event: &event.TaskCleaned{}}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	v, err := journal.EncodeRecord(event.Record{Seq: 2, Time: at, Task: "task/planted", Event: &event.TaskCleaned{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := PutRecord(path, 2, v); err != nil {
		t.Fatal(err)
	}
	if err := DeleteRecord(path, 3); err != nil {
		t.Fatal(err)
	}
	j, err = journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if r, err := j.Get(2); err != nil || r.Task != "task/planted" {
		t.Fatalf("record 2 after planting: %+v, %v; want task/planted", r, err)
	}
	if _, err := j.Get(3); err == nil {
		t.Fatal("record 3 still read after its deletion")
	}
}
