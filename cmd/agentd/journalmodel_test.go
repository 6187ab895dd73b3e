package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/journal/journaltest"
	"github.com/agentd/agentd/internal/model"
)

// `journal verify --model` on the recorded dev journal: every rule holds, exit 0; with the
// control plane's settle of a task's STOPPED taken out of the file, the model names the
// stopped-acked that came without it, and the command exits 1.
func TestJournalVerifyModelNamesTheViolation(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	bin := agentdBinary(t)
	path := filepath.Join(t.TempDir(), journal.FileName)
	if b, err := os.ReadFile("../../testdata/journals/dev.db"); err != nil || os.WriteFile(path, b, 0o600) != nil {
		t.Fatalf("copy the recorded dev journal: %v", err)
	}
	out, err := exec.Command(bin, "journal", "verify", "--model", "--file", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "every rule of the protocol model holds") {
		t.Fatalf("verify --model of the recorded dev journal: %v\n%s", err, out)
	}

	acked := unsettleFirstStop(t, path)
	cmd := exec.Command(bin, "journal", "verify", "--model", "--file", path)
	cmd.Env = append(os.Environ(), model.TallyEnv+"=") // planted, rejected on purpose: not the suites' to count
	out, err = cmd.CombinedOutput()
	want := fmt.Sprintf("record %d (stopped_acked %s): cleanup before the control plane settled the task's STOPPED", acked.Seq, acked.Task)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("verify --model of a journal without the settle: %v; want exit 1 and %q\n%s", err, want, out)
	}
}

// unsettleFirstStop rewrites, in place, the changes_settled that settled the first
// stopped-acked task's STOPPED without that id, and returns the stopped_acked.
func unsettleFirstStop(t *testing.T, path string) event.Record {
	t.Helper()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var acked event.Record
	settles := map[string]event.Record{} // change id → the settle that named it
	err = j.Iterate(1, func(r event.Record) error {
		switch e := r.Event.(type) {
		case *event.ChangesSettled:
			for _, id := range e.Accepted {
				settles[id] = r
			}
		case *event.StoppedAcked:
			if acked.Event == nil {
				acked = r
			}
		}
		return nil
	})
	if err != nil || acked.Event == nil {
		t.Fatalf("no stopped_acked in the recorded journal: %v", err)
	}
	id := acked.Event.(*event.StoppedAcked).ChangeID
	settle, ok := settles[id]
	if !ok {
		t.Fatalf("no settle names %s", id)
	}
	e := settle.Event.(*event.ChangesSettled)
	e.Accepted = slices.DeleteFunc(e.Accepted, func(a string) bool { return a == id })
	b, err := journal.EncodeRecord(settle)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if err := journaltest.PutRecord(path, settle.Seq, b); err != nil {
		t.Fatal(err)
	}
	return acked
}
