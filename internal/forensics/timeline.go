package forensics

import (
	"bufio"
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
	Host      string    `json:"host,omitempty"` // the agent id, in a timeline over several hosts' journals
	Kind      string    `json:"kind"`           // assigned, rejected, resent, desired, container, task, waiting, waited, reports-failed, settled, stopped-acked, cleanup, removed, cleaned, agent-started
	Container string    `json:"container,omitempty"`
	From      string    `json:"from,omitempty"`
	To        string    `json:"to,omitempty"`
	Text      string    `json:"text"`
	Until     time.Time `json:"until,omitzero"` // folded report attempts: the last one
	Count     int       `json:"count,omitempty"`
	// Conflict marks a step whose record another file gives differently (see recordSet).
	Conflict string `json:"conflict,omitempty"`
}

// Timeline is one task's life from the journal.
type Timeline struct {
	Task       string   `json:"task_arn"`
	Containers []string `json:"containers"`
	Steps      []Step   `json:"steps"`
	Phases     []Phase  `json:"phases"`
	Now        string   `json:"status_at_end"`
	// Hosts, in a timeline over several journals (FleetTimeline): each host's lanes are drawn
	// apart, in this order.
	Hosts []string            `json:"hosts,omitempty"`
	lanes map[string][]string // host → its containers, in the order first seen
	seen  map[[2]string]bool  // {host, ""} and {host, container} already listed: merging stays linear
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
	return buildTimeline(j, task)
}

// ErrTimelineBound is a timeline that would read more records than its caller allows.
var ErrTimelineBound = errors.New("too many journal records to draw")

// BuildTimelineWithin is BuildTimeline for a caller that must bound its work (the status page
// of a running agent): it reads only the records from `from` on (the task's first record,
// which the projection knows), at most limit of them in each of its two passes, and fails with
// ErrTimelineBound, naming the bound, rather than read further.
func BuildTimelineWithin(j *journal.Journal, task string, from uint64, limit int) (*Timeline, error) {
	tl, err := buildTimeline(boundedReader{j: j, from: from, limit: limit}, task)
	if err != nil {
		return nil, fmt.Errorf("timeline of task %q: %w", task, err)
	}
	return tl, nil
}

// timelineReader is what a timeline reads: the task's own records, and all records from one on.
type timelineReader interface {
	TaskRecords(task string, fn func(event.Record) error) error
	Iterate(from uint64, fn func(event.Record) error) error
}

// boundedReader reads a journal from one sequence number on, at most limit records a pass.
type boundedReader struct {
	j     *journal.Journal
	from  uint64
	limit int
}

func (b boundedReader) TaskRecords(task string, fn func(event.Record) error) error {
	return b.Iterate(b.from, func(r event.Record) error {
		if r.Task != task {
			return nil
		}
		return fn(r)
	})
}

func (b boundedReader) Iterate(from uint64, fn func(event.Record) error) error {
	from = max(from, b.from)
	read := 0
	return b.j.Iterate(from, func(r event.Record) error {
		if read++; read > b.limit {
			return fmt.Errorf("%w: more than %d records from sequence %d on (draw it with `agentd journal timeline --svg`, which has no bound)", ErrTimelineBound, b.limit, from)
		}
		return fn(r)
	})
}

func buildTimeline(j timelineReader, task string) (*Timeline, error) {
	tl := &Timeline{Task: task}
	changes := map[uint64]string{} // seq of a reportable transition → what it reported
	var first uint64
	var recs []event.Record
	err := j.TaskRecords(task, func(r event.Record) error {
		if first == 0 {
			first = r.Seq
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if first == 0 {
		return nil, fmt.Errorf("task %q: no record in the journal (a typo, or compacted away)", task)
	}
	var stepsFromScan []Step
	idSeq := func(id string) uint64 { seq, _ := fsm.ChangeSeq(id); return seq }
	// Pass 1: the task's own records tell which change ids are its own.
	for _, r := range recs {
		switch e := r.Event.(type) {
		case *event.ContainerTransitioned:
			if e.To.Reportable() {
				changes[r.Seq] = r.Container + " " + string(e.To)
			}
		case *event.TaskTransitioned:
			if e.To.Reportable() {
				changes[r.Seq] = "task " + string(e.To)
			}
		case *event.TaskRejected:
			changes[r.Seq] = "task STOPPED"
		}
	}
	// Pass 2: everything from the task's first record on — its reports, and restarts.
	var fold *Step
	flush := func() {
		if fold != nil {
			stepsFromScan = append(stepsFromScan, *fold)
			fold = nil
		}
	}
	var end time.Time // the journal's last record: where the timeline ends
	err = j.Iterate(first, func(r event.Record) error {
		end = r.Time
		switch e := r.Event.(type) {
		case *event.ReportAttempted:
			mine := 0
			for _, id := range e.IDs {
				if _, ok := changes[idSeq(id)]; ok {
					mine++
				}
			}
			if mine == 0 {
				return nil
			}
			n := max(e.Count, 1)
			if fold != nil && fold.Text == e.Outcome {
				fold.Count += n
				fold.Until = r.Time
				return nil
			}
			flush()
			fold = &Step{Seq: r.Seq, Time: r.Time, Kind: "reports-failed", Text: e.Outcome, Count: n, Until: r.Time}
		case *event.ChangesSettled:
			var acc, rej []string
			for _, id := range e.Accepted {
				if what, ok := changes[idSeq(id)]; ok {
					acc = append(acc, what)
				}
			}
			for _, x := range e.Rejected {
				if what, ok := changes[idSeq(x.ID)]; ok {
					rej = append(rej, what+" ("+x.Error+")")
				}
			}
			if len(acc)+len(rej) == 0 {
				return nil
			}
			flush()
			text := "accepted: " + strings.Join(acc, ", ")
			if len(rej) > 0 {
				text += "; rejected: " + strings.Join(rej, ", ")
			}
			stepsFromScan = append(stepsFromScan, Step{Seq: r.Seq, Time: r.Time, Kind: "settled", Text: text})
		case *event.AgentStarted:
			flush()
			stepsFromScan = append(stepsFromScan, Step{Seq: r.Seq, Time: r.Time, Kind: "agent-started", Text: fmt.Sprintf("agent (re)started, pid %d", e.PID)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	flush()
	// Merge the task's own steps with the scanned ones, in sequence order.
	var own []Step
	w := newWaits()
	for _, r := range recs {
		own = append(own, stepOf(r, tl))
		own = append(own, w.after(r)...)
	}
	tl.Steps = mergeSteps(own, stepsFromScan)
	tl.phases()
	if t := w.task(); t != nil && !end.IsZero() {
		for _, c := range t.Containers {
			if wait, ok := t.Waiting(c, end); ok {
				tl.Now += fmt.Sprintf("; %s %s at the journal's last record (%s)", c.Name, wait.Reason(end), end.UTC().Format("2006-01-02T15:04:05.000Z"))
			}
		}
	}
	return tl, nil
}

// waits follows what the task's containers wait for (depends_on), by replaying the task's own
// records into a projection of their own: the same derivation the agent's API shows, so the
// timeline and /v1/tasks never disagree. A record that projection refuses (the task's history
// was compacted into a snapshot, or needs records of other subjects, as a settlement) ends
// the following: waits only happen before a task stops, from its first record on.
type waits struct {
	st    *fsm.State
	off   bool
	since map[string]fsm.Wait // container → its wait, while it waits
	what  map[string]string   // container → what it waits for, as last told
}

func newWaits() *waits {
	return &waits{st: fsm.New(), since: map[string]fsm.Wait{}, what: map[string]string{}}
}

func (w *waits) task() *fsm.Task {
	if w.off {
		return nil
	}
	for _, t := range w.st.Tasks {
		return t
	}
	return nil
}

// after applies a record and says which waits began, changed or ended with it.
func (w *waits) after(r event.Record) []Step {
	if w.off {
		return nil
	}
	if err := w.st.Apply(r); err != nil {
		w.off = true
		return nil
	}
	t := w.task()
	if t == nil {
		return nil
	}
	var out []Step
	for _, c := range t.Containers {
		wait, ok := t.Waiting(c, r.Time)
		prev, was := w.since[c.Name]
		switch {
		case ok:
			what := fmt.Sprintf("%s waiting for %s (%s)", c.Name, wait.For(), strings.Join(wait.Standing, "; "))
			if what != w.what[c.Name] {
				out = append(out, Step{Seq: r.Seq, Time: r.Time, Kind: "waiting", Container: c.Name, Text: what})
			}
			w.since[c.Name], w.what[c.Name] = wait, what
		case was:
			out = append(out, Step{Seq: r.Seq, Time: r.Time, Kind: "waited", Container: c.Name,
				Text: fmt.Sprintf("%s no longer waits for %s: %s since the task arrived", c.Name, prev.For(), prev.Waited(r.Time))})
			delete(w.since, c.Name)
			delete(w.what, c.Name)
		}
	}
	return out
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
	case *event.RecordRefused:
		s.Kind, s.Text = "refused", fmt.Sprintf("payload %s acknowledged, its %s refused by the core and never journaled (a bug): %s", orDash(e.MessageID), e.Record, e.Reason)
		if e.Desired != "" {
			s.Text += "; desired status " + string(e.Desired) + " asked: decided again at the next start"
		}
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
	case *event.ContainerRolledBack:
		s.Kind, s.Text = "rolled-back", r.Container+" gone before it ever started (the runtime rolled its create back): created again; "+event.Describe(e)
	case *event.ContainerRemoved:
		s.Kind, s.Text = "removed", r.Container+" removed"
		if e.Fence {
			s.Kind, s.Text = "fenced", r.Container+" removed before it ever ran (a fence): a start asked earlier can no longer land"
		}
		if e.Again {
			s.Text += "; made again as a new container"
		}
	case *event.TaskCleaned:
		s.Kind, s.Text = "cleaned", "cleaned: tombstone kept"
	case *event.HealthChanged:
		s.Kind, s.Text = "health", subjectText(r.Container, event.Describe(e))
	default:
		// Every line says whose it is (a call=start, say, is a container's).
		s.Kind, s.Text = r.Type().String(), subjectText(r.Container, event.Describe(r.Event))
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
func (tl *Timeline) WriteText(out io.Writer) {
	w := bufio.NewWriter(out) // a line is a write: not a system call each
	defer w.Flush()
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
		if len(tl.Hosts) > 0 {
			fmt.Fprintf(w, "  %-16s", event.Printable(s.Host))
		}
		fmt.Fprintf(w, "  %8d  %s  %10s  %s%s\n", s.Seq, s.Time.UTC().Format("2006-01-02T15:04:05.000Z"), "+"+s.Time.Sub(t0).Round(time.Millisecond).String(),
			event.PrintableText(text), conflictNote(s.Conflict))
	}
	for _, p := range tl.Phases {
		fmt.Fprintf(w, "  %-42s %s\n", event.PrintableText(p.Name), p.Duration.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  at the end of the journal: %s\n", event.PrintableText(tl.Now))
}
