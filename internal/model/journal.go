package model

// Checking a whole journal file, the one door the test suites and `agentd journal verify
// --model` share. Every check is counted, so a test run can say how many journals the model
// accepted and rejected across the many processes of `make test`: through the file
// AGENTD_MODEL_TALLY names, one line a journal.

import (
	"fmt"
	"os"
	"strings"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// Report is the model's verdict on one journal.
type Report struct {
	Records    int
	Tasks      int
	Violations []Violation
}

// Err is nil when the journal keeps every rule, else an error listing the violations.
func (r Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	lines := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		lines[i] = v.String()
	}
	return fmt.Errorf("model: %d violations:\n  %s", len(r.Violations), strings.Join(lines, "\n  "))
}

// Read steps every record of j through a fresh model. The error is the journal's
// (unreadable, damaged); the report says what the records broke.
func Read(j *journal.Journal) (Report, error) {
	m := New()
	err := j.Iterate(1, func(rec event.Record) error { m.Step(rec); return nil })
	rep := Report{Records: m.Records(), Tasks: m.Tasks(), Violations: m.Violations()}
	if err != nil {
		return rep, fmt.Errorf("model: read %s: %w", j.Path(), err)
	}
	return rep, nil
}

// CheckJournal is Read of a journal a run left behind, counted in the tally: the verdict on
// a whole journal (a journal read half-way, as a failed run's, is Read alone).
func CheckJournal(j *journal.Journal) (Report, error) {
	rep, err := Read(j)
	if err == nil {
		count(j.Path(), rep)
	}
	return rep, err
}

// Check is CheckJournal for the test suites: any error or violation is one error.
func Check(j *journal.Journal) error {
	rep, err := CheckJournal(j)
	if err != nil {
		return err
	}
	return rep.Err()
}

// TallyEnv names the file each check appends "accepted <path>" or "rejected <path>" to.
const TallyEnv = "AGENTD_MODEL_TALLY"

func count(path string, rep Report) {
	verdict := "accepted"
	if len(rep.Violations) > 0 {
		verdict = "rejected"
	}
	name := os.Getenv(TallyEnv)
	if name == "" {
		return
	}
	// One write of one short line with O_APPEND: lines of concurrent processes never mix.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return // a tally is a count for the test run, never a reason to fail a check
	}
	defer f.Close()
	_, _ = fmt.Fprintf(f, "%s %d %s\n", verdict, rep.Records, path)
}
