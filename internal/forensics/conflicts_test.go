package forensics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/forensics"
)

// TestMergedViewsShowEachRecordOnceAndEveryConflict: agent-a's journal merged with another
// file that holds its records — the same file again, a copy, its export, or an export with
// its record 7 (the OOM kill) forged under agent-a's id and sequence number — shows each record
// once, a file given twice is read once and said so, and a forged record is shown beside the
// real one, both marked, with a warning naming both sources.
func TestMergedViewsShowEachRecordOnceAndEveryConflict(t *testing.T) {
	a, _ := twoHosts(t)
	copyOfA := filepath.Join(t.TempDir(), "copy.db")
	if b, err := os.ReadFile(a); err != nil || os.WriteFile(copyOfA, b, 0o600) != nil {
		t.Fatal(err)
	}
	forged := exportOf(t, a, "agent-a", func(e *forensics.Entry) bool {
		if e.Seq != 7 {
			return false
		}
		zero := int64(0)
		e.ExitCode, e.Reason, e.Text = &zero, "", "RUNNING → STOPPED exit=0"
		return true
	})
	for _, c := range []struct {
		name     string
		second   string
		records  int      // entries of the task shown
		marked   int      // of them marked CONFLICT
		warnings []string // what the warning names
	}{
		{"the same file twice", a, 8, 0, []string{a + " is the same file as " + a + ": read once"}},
		{"a copy", copyOfA, 8, 0, []string{copyOfA + " is the same content", "as " + a + ": read once"}},
		{"its export", exportOf(t, a, "agent-a", nil), 8, 0, nil},
		{"a forged record", forged, 9, 2, []string{"2 different records of host agent-a seq 7: " + a + "; " + forged + " line 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var warnings []string
			warn := func(s string) { warnings = append(warnings, s) }
			files, closeAll, err := forensics.OpenHostFiles(context.Background(), []string{a, c.second}, warn)
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll()
			entries, err := forensics.TaskEntries(files, arn, warn)
			if err != nil {
				t.Fatal(err)
			}
			if got := countMarked(entries, func(e forensics.Entry) string { return e.Conflict }); len(entries) != c.records || got != c.marked {
				t.Errorf("dump: %d entries, %d marked; want %d, %d marked", len(entries), got, c.records, c.marked)
			}
			tl, err := forensics.FleetTimeline(files, arn, warn)
			if err != nil {
				t.Fatal(err)
			}
			if got := countMarked(tl.Steps, func(s forensics.Step) string { return s.Conflict }); got != c.marked {
				t.Errorf("timeline: %d steps marked, want %d", got, c.marked)
			}
			var text bytes.Buffer
			tl.WriteText(&text)
			if strings.Count(text.String(), "[CONFLICT:") != c.marked || strings.Count(text.String(), "exit=137") != 1 {
				t.Errorf("timeline text: want %d lines marked CONFLICT and the OOM kill (exit=137) once:\n%s", c.marked, text.String())
			}
			if all := strings.Join(warnings, "\n"); len(c.warnings) == 0 && all != "" {
				t.Errorf("warnings %q, want none", warnings)
			}
			for _, want := range c.warnings {
				if !strings.Contains(strings.Join(warnings, "\n"), want) {
					t.Errorf("warnings %q, want one saying %q", warnings, want)
				}
			}
		})
	}
}

func countMarked[T any](items []T, mark func(T) string) int {
	n := 0
	for _, it := range items {
		if mark(it) != "" {
			n++
		}
	}
	return n
}

// TestManyVersionsOfOneRecordAreMarkedBriefly: 2,000 different versions of one record (a
// hostile file forges them cheaply) are each kept and marked, the mark naming a few sources and
// how many more — not all 2,000, which made the output grow as the square of the input — while
// the one warning names them all.
func TestManyVersionsOfOneRecordAreMarkedBriefly(t *testing.T) {
	const n = 2000
	var in strings.Builder
	in.WriteString(agentdResource)
	for i := range n {
		if i > 0 {
			in.WriteString(",")
		}
		in.WriteString(otlpRecord(1, fmt.Sprintf("cleanup_started arn:task/x version %d", i)))
	}
	in.WriteString("]}]}]}\n")
	var out bytes.Buffer
	var warnings []string
	got, err := forensics.ImportOTLP(strings.NewReader(in.String()), &out, func(s string) { warnings = append(warnings, s) })
	if err != nil || got != n {
		t.Fatalf("imported %d, %v; want all %d versions", got, err, n)
	}
	if len(warnings) != 1 || strings.Count(warnings[0], "line 1 record") != n {
		t.Fatalf("%d warnings; want one naming all %d versions", len(warnings), n)
	}
	for line := range strings.Lines(out.String()) {
		var e forensics.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Conflict, fmt.Sprintf("%d different records", n)) || !strings.Contains(e.Conflict, fmt.Sprintf("and %d more", n-3)) || len(e.Conflict) > 1024 {
			t.Fatalf("a version's mark (%d bytes) %.200q; want under 1 KiB, counting the versions and naming a few", len(e.Conflict), e.Conflict)
		}
	}
}
