package forensics

import (
	"fmt"
	"io"
	"os"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/fsm"
	"github.com/agentd/agentd/internal/journal"
)

// Finding is one problem verify found: a damaged record, a gap, or a broken invariant.
type Finding struct {
	Seq    uint64 `json:"seq"`
	Task   string `json:"task_arn,omitempty"`
	Kind   string `json:"kind"` // "file", "record", or an invariant's rule name
	Detail string `json:"detail"`
}

// VerifyReport is everything verify found, with the summary figures.
type VerifyReport struct {
	File      string    `json:"file"`
	Records   int       `json:"records"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	Snapshots int       `json:"snapshots"`
	Cuts      int       `json:"compaction_cuts"`
	Tasks     int       `json:"tasks_live"`
	Tombs     int       `json:"tombstones"`
	Findings  []Finding `json:"findings"`
}

// Verify checks every record's checksum, encoding and body, sequence continuity (compaction
// cuts allowed) and the snapshots, and replays the whole history through the projection's
// invariant checker — the same checks the daemon's projection enforces.
func Verify(j *journal.Journal) (VerifyReport, error) {
	checker := fsm.NewChecker(nil)
	res, err := j.Verify(func(r event.Record) { checker.Record(r) })
	if err != nil {
		return VerifyReport{}, err
	}
	rep := VerifyReport{File: j.Path(), Records: res.Records, FirstSeq: res.FirstSeq, LastSeq: res.LastSeq, Snapshots: res.Snapshots,
		Cuts: res.Holes, Tasks: len(checker.State.Tasks), Tombs: len(checker.State.Tombstones), Findings: []Finding{}}
	for _, p := range res.Problems {
		kind := "record"
		if p.Seq == 0 {
			kind = "file"
		}
		rep.Findings = append(rep.Findings, Finding{Seq: p.Seq, Task: p.Task, Kind: kind, Detail: p.What})
	}
	for _, v := range checker.Violations {
		rep.Findings = append(rep.Findings, Finding{Seq: v.Seq, Task: v.Task, Kind: string(v.Rule), Detail: v.Detail})
	}
	return rep, nil
}

// Summary is the one line verify prints when all is well.
func (r VerifyReport) Summary() string {
	size := ""
	if st, err := os.Stat(r.File); err == nil {
		size = fmt.Sprintf(", %d bytes", st.Size())
	}
	return fmt.Sprintf("%s: %d records (%d..%d), %d snapshots, %d compaction cuts, %d live tasks, %d tombstones%s: every checksum, sequence and invariant holds",
		r.File, r.Records, r.FirstSeq, r.LastSeq, r.Snapshots, r.Cuts, r.Tasks, r.Tombs, size)
}

// Write prints every finding, one a line, named by sequence number and task.
func (r VerifyReport) Write(w io.Writer) {
	for _, f := range r.Findings {
		task := ""
		if f.Task != "" {
			task = " task " + event.Printable(f.Task)
		}
		fmt.Fprintf(w, "record %d%s: %s: %s\n", f.Seq, task, f.Kind, event.PrintableText(f.Detail))
	}
	fmt.Fprintf(w, "%s: %d problems in %d records\n", r.File, len(r.Findings), r.Records)
}
