package forensics

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/fsm"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// Step is one line of a task's life.
type Step struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Kind      string    `json:"kind"` // assigned, rejected, resent, desired, container, task, reports-failed, settled, stopped-acked, cleanup, removed, cleaned, agent-started
	Container string    `json:"container,omitempty"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	Text      string    `json:"text"`
	Until     time.Time `json:"until,omitzero"` // folded report attempts: the last one
	Count     int       `json:"count,omitempty"`
}

// Timeline is one task's life from the journal.
type Timeline struct {
	Task       string   `json:"task_arn"`
	Containers []string `json:"containers"`
	Steps      []Step   `json:"steps"`
	Phases     []Phase  `json:"phases"`
	Now        string   `json:"status_at_end"`
}

// Phase is a span between two milestones.
type Phase struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// BuildTimeline gathers a task's records (a scan of the record envelopes) and the reports that
// concern it (settlements and failed attempts name change ids, not tasks: they are matched by
// the sequence numbers of the task's changes).
func BuildTimeline(j *journal.Journal, task string) (*Timeline, error) {
	b := newTimelineBuilder(task)
	var first uint64
	err := j.TaskRecords(task, func(r event.Record) error {
		if first == 0 {
			first = r.Seq
		}
		b.own(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if first == 0 {
		return nil, fmt.Errorf("task %q: no record in the journal (a typo, or compacted away)", task)
	}
	// Everything from the task's first record on — its reports, and restarts.
	if err := j.Iterate(first, func(r event.Record) error { b.scan(r); return nil }); err != nil {
		return nil, err
	}
	return b.done(), nil
}

// ErrTimelineBound is a timeline that would read more records than its caller allows.
var ErrTimelineBound = errors.New("too many journal records to draw")

// BuildTimelineWithin is BuildTimeline for a caller that must bound its work (the status page
// of a running agent): it reads the records from `from` on (the task's first record, which the
// projection knows), never more than limit of them, and fails with ErrTimelineBound, naming
// the bound, rather than read further. It reads each record once: a report always follows the
// changes it names, so the task's own records are known before any report that needs them.
func BuildTimelineWithin(j *journal.Journal, task string, from uint64, limit int) (*Timeline, error) {
	b := newTimelineBuilder(task)
	read := 0
	err := j.Iterate(from, func(r event.Record) error {
		if read++; read > limit {
			return fmt.Errorf("task %q: %w: more than %d records from sequence %d on (draw it with `agentd journal timeline --svg`, which has no bound)", task, ErrTimelineBound, limit, from)
		}
		if r.Task == task {
			b.own(r)
		}
		b.scan(r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(b.recs) == 0 {
		return nil, fmt.Errorf("task %q: no record in the journal from sequence %d on", task, from)
	}
	return b.done(), nil
}

// timelineBuilder folds records into a timeline: the task's own records (own) and the
// records that concern it without naming it (scan), in sequence order.
type timelineBuilder struct {
	tl      *Timeline
	changes map[uint64]string // seq of a reportable transition → what it reported
	recs    []event.Record
	fold    *Step
	scanned []Step
}

func newTimelineBuilder(task string) *timelineBuilder {
	return &timelineBuilder{tl: &Timeline{Task: task}, changes: map[uint64]string{}}
}

// own takes one of the task's own records: which change ids are its own.
func (b *timelineBuilder) own(r event.Record) {
	b.recs = append(b.recs, r)
	switch e := r.Event.(type) {
	case *event.ContainerTransitioned:
		if e.To.Reportable() {
			b.changes[r.Seq] = r.Container + " " + string(e.To)
		}
	case *event.TaskTransitioned:
		if e.To.Reportable() {
			b.changes[r.Seq] = "task " + string(e.To)
		}
	case *event.TaskRejected:
		b.changes[r.Seq] = "task STOPPED"
	}
}

func (b *timelineBuilder) flush() {
	if b.fold != nil {
		b.scanned = append(b.scanned, *b.fold)
		b.fold = nil
	}
}

// scan takes any record: the reports that name the task's changes, and restarts.
func (b *timelineBuilder) scan(r event.Record) {
	idSeq := func(id string) uint64 { seq, _ := fsm.ChangeSeq(id); return seq }
	switch e := r.Event.(type) {
	case *event.ReportAttempted:
		mine := 0
		for _, id := range e.IDs {
			if _, ok := b.changes[idSeq(id)]; ok {
				mine++
			}
		}
		if mine == 0 {
			return
		}
		n := max(e.Count, 1)
		if b.fold != nil && b.fold.Text == e.Outcome {
			b.fold.Count += n
			b.fold.Until = r.Time
			return
		}
		b.flush()
		b.fold = &Step{Seq: r.Seq, Time: r.Time, Kind: "reports-failed", Text: e.Outcome, Count: n, Until: r.Time}
	case *event.ChangesSettled:
		var acc, rej []string
		for _, id := range e.Accepted {
			if what, ok := b.changes[idSeq(id)]; ok {
				acc = append(acc, what)
			}
		}
		for _, x := range e.Rejected {
			if what, ok := b.changes[idSeq(x.ID)]; ok {
				rej = append(rej, what+" ("+x.Error+")")
			}
		}
		if len(acc)+len(rej) == 0 {
			return
		}
		b.flush()
		text := "accepted: " + strings.Join(acc, ", ")
		if len(rej) > 0 {
			text += "; rejected: " + strings.Join(rej, ", ")
		}
		b.scanned = append(b.scanned, Step{Seq: r.Seq, Time: r.Time, Kind: "settled", Text: text})
	case *event.AgentStarted:
		b.flush()
		b.scanned = append(b.scanned, Step{Seq: r.Seq, Time: r.Time, Kind: "agent-started", Text: fmt.Sprintf("agent (re)started, pid %d", e.PID)})
	}
}

// done merges the task's own steps with the scanned ones, in sequence order.
func (b *timelineBuilder) done() *Timeline {
	b.flush()
	var own []Step
	for _, r := range b.recs {
		own = append(own, stepOf(r, b.tl))
	}
	b.tl.Steps = mergeSteps(own, b.scanned)
	b.tl.phases()
	return b.tl
}

func stepOf(r event.Record, tl *Timeline) Step {
	s := Step{Seq: r.Seq, Time: r.Time, Container: r.Container}
	switch e := r.Event.(type) {
	case *event.TaskAdded:
		s.Kind = "assigned"
		names := make([]string, len(e.Containers))
		for i, c := range e.Containers {
			names[i] = c.Name
		}
		tl.Containers = names
		s.Text = fmt.Sprintf("assigned in %s, desired %s, containers %s", orDash(e.MessageID), e.Desired, strings.Join(names, ", "))
	case *event.TaskRejected:
		s.Kind, s.Text = "rejected", "invalid, recorded STOPPED: "+e.Reason
	case *event.TaskResent:
		s.Kind, s.Text = "resent", fmt.Sprintf("sent again in %s (not run again)", orDash(e.MessageID))
	case *event.DesiredChanged:
		s.Kind, s.Text = "desired", "desired status → "+string(e.To)
	case *event.ContainerTransitioned:
		s.Kind, s.From, s.To = "container", string(e.From), string(e.To)
		s.Text = r.Container + " " + event.Describe(e)
	case *event.TaskTransitioned:
		s.Kind, s.From, s.To = "task", string(e.From), string(e.To)
		s.Text = "task " + event.Describe(e)
	case *event.StoppedAcked:
		s.Kind, s.Text = "stopped-acked", "STOPPED settled by the control plane ("+e.ChangeID+"): cleanup allowed from now"
	case *event.CleanupStarted:
		s.Kind, s.Text = "cleanup", "cleanup started"
	case *event.ContainerRemoved:
		s.Kind, s.Text = "removed", r.Container+" removed"
	case *event.TaskCleaned:
		s.Kind, s.Text = "cleaned", "cleaned: tombstone kept"
	default:
		s.Kind, s.Text = r.Type().String(), event.Describe(r.Event)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mergeSteps(a, b []Step) []Step {
	out := make([]Step, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || (len(a) > 0 && a[0].Seq < b[0].Seq) {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return out
}

// phases measures the spans an operator asks about, and says where the task stands.
func (tl *Timeline) phases() {
	at := map[string]time.Time{}
	status := "NONE"
	for _, s := range tl.Steps {
		key := s.Kind
		if s.Kind == "task" {
			key = "task " + s.To
			status = s.To
		}
		if s.Kind == "rejected" {
			key, status = "task STOPPED", "STOPPED"
			at["assigned"] = s.Time
		}
		switch s.Kind {
		case "stopped-acked":
			status = "STOPPED_ACKED"
		case "cleanup":
			status = "CLEANING"
		case "cleaned":
			status = "CLEANED"
		}
		if _, seen := at[key]; !seen {
			at[key] = s.Time
		}
	}
	add := func(name, from, to string) {
		a, okA := at[from]
		b, okB := at[to]
		if okA && okB {
			tl.Phases = append(tl.Phases, Phase{Name: name, Duration: b.Sub(a)})
		}
	}
	add("assigned → running", "assigned", "task RUNNING")
	add("running → stopped", "task RUNNING", "task STOPPED")
	add("stopped → acknowledged (blocked on ack)", "task STOPPED", "stopped-acked")
	add("acknowledged → cleanup started", "stopped-acked", "cleanup")
	add("cleanup", "cleanup", "cleaned")
	add("assigned → cleaned", "assigned", "cleaned")
	switch status {
	case "CLEANED":
		tl.Now = "CLEANED"
	case "STOPPED":
		tl.Now = "STOPPED: not cleaned because the control plane has not settled its STOPPED (the guard)"
	case "STOPPED_ACKED":
		tl.Now = "STOPPED_ACKED: waiting out the cleanup wait from the journaled stop time"
	default:
		tl.Now = status
	}
}

// WriteText prints the timeline for people, with the time since assignment on each line.
func (tl *Timeline) WriteText(w io.Writer) {
	fmt.Fprintf(w, "task %s\n", event.Printable(tl.Task))
	var t0 time.Time
	if len(tl.Steps) > 0 {
		t0 = tl.Steps[0].Time
	}
	for _, s := range tl.Steps {
		text := s.Text
		if s.Kind == "reports-failed" {
			text = fmt.Sprintf("reports %s %d× until %s", s.Text, s.Count, s.Until.UTC().Format("15:04:05.000"))
		}
		fmt.Fprintf(w, "  %8d  %s  %10s  %s\n", s.Seq, s.Time.UTC().Format("2006-01-02T15:04:05.000Z"), "+"+s.Time.Sub(t0).Round(time.Millisecond).String(), event.PrintableText(text))
	}
	for _, p := range tl.Phases {
		fmt.Fprintf(w, "  %-42s %s\n", event.PrintableText(p.Name), p.Duration.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  at the end of the journal: %s\n", event.PrintableText(tl.Now))
}
