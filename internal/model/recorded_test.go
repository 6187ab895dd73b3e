package model_test

// The journals recorded in testdata (a crash loop, the dev demo, older schemas) keep every
// rule: what real runs wrote, read by the model as an operator's `journal verify --model` would.

import (
	"io"
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
			j, err := journal.Open(copyOf(t, src), journal.Options{ReadOnly: true})
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

// copyOf keeps the recorded file untouched: opening may take its lock or upgrade nothing, but
// a test never writes into testdata.
func copyOf(t *testing.T, src string) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(t.TempDir(), journal.FileName)
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
