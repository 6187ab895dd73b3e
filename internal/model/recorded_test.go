package model_test

// The journals recorded in testdata (a crash loop, the dev demo, older schemas) keep every
// rule: what real runs wrote, read by the model as an operator's `journal verify --model` would.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/internal/journal"
	"github.com/agentd/agentd/internal/model"
)

func TestRecordedJournalsKeepEveryRule(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/journals/*.db")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no recorded journals: %v", err)
	}
	for _, src := range paths {
		t.Run(filepath.Base(src), func(t *testing.T) {
			// A copy: the test never writes into testdata.
			path := filepath.Join(t.TempDir(), journal.FileName)
			if b, err := os.ReadFile(src); err != nil || os.WriteFile(path, b, 0o600) != nil {
				t.Fatalf("copy %s: %v", src, err)
			}
			j, err := journal.Open(path, journal.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			rep, err := model.CheckJournal(j)
			if err != nil || rep.Err() != nil {
				t.Fatalf("%v %v", err, rep.Err())
			}
			t.Logf("%d records, %d tasks: accepted", rep.Records, rep.Tasks)
		})
	}
}
