package forensics

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// Entry is one record of one host as the multi-host commands merge them: read from a journal,
// or from an export `agentd journal import-otlp` made of what a log pipeline received. It
// holds only what PROTOCOL.md §5 ships, so both kinds of input read the same.
type Entry struct {
	Host        string    `json:"host"`
	Seq         uint64    `json:"seq,omitempty"`
	Time        time.Time `json:"time"`
	Type        string    `json:"type"`
	Task        string    `json:"task_arn,omitempty"`
	Container   string    `json:"container,omitempty"`
	From        string    `json:"from,omitempty"`
	To          string    `json:"to,omitempty"`
	ExitCode    *int64    `json:"exit_code,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	ChangeID    string    `json:"change_id,omitempty"`
	MessageID   string    `json:"message_id,omitempty"`
	ImageDigest string    `json:"image_digest,omitempty"`
	Severity    string    `json:"severity,omitempty"`
	SeqFrom     uint64    `json:"seq_from,omitempty"` // a gap's first missing record
	SeqTo       uint64    `json:"seq_to,omitempty"`   // and its last
	Text        string    `json:"text"`               // the line `journal dump` prints after the subject
	// Conflict marks a record another source gives differently under the same host and
	// sequence number, naming every source (see recordSet).
	Conflict string `json:"conflict,omitempty"`
}

// EntryOf is a journal record as an Entry of host.
func EntryOf(host string, r event.Record) Entry {
	e := Entry{Host: host, Seq: r.Seq, Time: r.Time, Type: r.Type().String(), Task: r.Task, Container: r.Container, Text: event.Describe(r.Event)}
	switch ev := r.Event.(type) {
	case *event.ContainerTransitioned:
		e.From, e.To, e.Reason, e.ImageDigest = string(ev.From), string(ev.To), ev.Reason, ev.ImageDigest
		if ev.ExitCode != nil {
			c := int64(*ev.ExitCode)
			e.ExitCode = &c
		}
	case *event.TaskTransitioned:
		e.From, e.To, e.Reason = string(ev.From), string(ev.To), ev.Reason
	case *event.StoppedAcked:
		e.ChangeID = ev.ChangeID
	case *event.TaskAdded:
		e.MessageID = ev.MessageID
	}
	return e
}

// HostFile is one input of the multi-host commands: a journal (or `journal export` copy), or
// an import-otlp export (JSON lines of Entry).
type HostFile struct {
	Path    string
	Host    string // the agent id the journal keeps (meta agent_id), else the file's name
	journal *journal.Journal
	entries []Entry // an export's, all hosts
}

// OpenHostFiles opens every file read-only, telling journals from exports by their first
// byte (an export is JSON lines). The close function closes them all.
func OpenHostFiles(ctx context.Context, paths []string) ([]*HostFile, func(), error) {
	var out []*HostFile
	closeAll := func() {
		for _, h := range out {
			if h.journal != nil {
				h.journal.Close()
			}
		}
	}
	for _, p := range paths {
		h, err := openHostFile(ctx, p)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, h)
	}
	return out, closeAll, nil
}

func openHostFile(ctx context.Context, path string) (*HostFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	head := make([]byte, 1)
	_, _ = io.ReadFull(f, head)
	if head[0] == '{' {
		defer f.Close()
		_, _ = f.Seek(0, io.SeekStart)
		entries, err := ReadEntries(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &HostFile{Path: path, entries: entries}, nil
	}
	f.Close()
	j, _, err := Open(ctx, Source{File: path})
	if err != nil {
		return nil, err
	}
	host, _ := j.Meta("agent_id")
	if host == "" {
		host = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return &HostFile{Path: path, Host: host, journal: j}, nil
}

// ReadEntries reads an export: one JSON Entry a line. A bad line is an error naming it.
func ReadEntries(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("line %d: not an export entry: %w", n, err)
		}
		if e.Host == "" || e.Type == "" {
			return nil, fmt.Errorf("line %d: an export entry needs host and type", n)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// TaskEntries is every entry of task in the files, merged by time (ties: host, then seq).
func TaskEntries(files []*HostFile, task string) ([]Entry, error) {
	var out []Entry
	for _, h := range files {
		if h.journal != nil {
			err := h.journal.TaskRecords(task, func(r event.Record) error {
				out = append(out, EntryOf(h.Host, r))
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", h.Path, err)
			}
			continue
		}
		for _, e := range h.entries {
			if e.Task == task {
				out = append(out, e)
			}
		}
	}
	sortEntries(out)
	return out, nil
}

func sortEntries(es []Entry) {
	slices.SortStableFunc(es, func(a, b Entry) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Seq, b.Seq))
	})
}

// EntryLine prints an entry as `journal dump` prints a record, with its host first.
func EntryLine(e Entry) string {
	subj := "-"
	if e.Task != "" {
		subj = event.Printable(e.Task)
	}
	if e.Container != "" {
		subj += "/" + event.Printable(e.Container)
	}
	return strings.TrimRight(fmt.Sprintf("%-16s %8d  %s  %-22s %-28s %s", event.Printable(e.Host), e.Seq, e.Time.UTC().Format("2006-01-02T15:04:05.000Z"),
		event.Printable(e.Type), subj, event.PrintableText(e.Text)), " ")
}

// FleetTimeline is one task's life across hosts: each journal's own timeline (BuildTimeline),
// and each export's entries as steps, every step naming its host, merged by time.
func FleetTimeline(files []*HostFile, task string) (*Timeline, error) {
	tl := &Timeline{Task: task}
	var steps []Step
	for _, h := range files {
		if h.journal != nil {
			one, err := BuildTimeline(h.journal, task)
			if err != nil {
				if h.journal != nil && len(files) > 1 && strings.Contains(err.Error(), "no record in the journal") {
					continue // the task never ran on this host
				}
				return nil, fmt.Errorf("%s: %w", h.Path, err)
			}
			for _, s := range one.Steps {
				s.Host = h.Host
				steps = append(steps, s)
			}
			tl.addContainers(h.Host, one.Containers)
			continue
		}
		for _, e := range h.entries {
			if e.Task != task {
				continue
			}
			steps = append(steps, stepOfEntry(e))
			if e.Type == "task_added" {
				tl.addContainers(e.Host, nil)
			}
			if e.Container != "" {
				tl.addContainers(e.Host, []string{e.Container})
			}
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("task %q: no record in any of the %d files", task, len(files))
	}
	slices.SortStableFunc(steps, func(a, b Step) int {
		return cmp.Or(a.Time.Compare(b.Time), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Seq, b.Seq))
	})
	tl.Steps = steps
	tl.phases()
	return tl, nil
}

// addContainers records a host's lane and its containers' lanes, in the order first seen.
func (tl *Timeline) addContainers(host string, names []string) {
	if !slices.Contains(tl.Hosts, host) {
		tl.Hosts = append(tl.Hosts, host)
	}
	for _, n := range names {
		lane := host + "\x00" + n
		if !slices.Contains(tl.lanes, lane) {
			tl.lanes = append(tl.lanes, lane)
		}
	}
}

// stepKinds names an exported record type by the step kind BuildTimeline gives that record;
// a type not listed is its own kind.
var stepKinds = map[string]string{
	"task_added": "assigned", "task_rejected": "rejected", "task_resent": "resent", "desired_changed": "desired",
	"container_transitioned": "container", "task_transitioned": "task", "stopped_acked": "stopped-acked",
	"cleanup_started": "cleanup", "container_removed": "removed", "task_cleaned": "cleaned", "health_changed": "health",
}

// stepOfEntry is an exported entry as a timeline step, the kinds BuildTimeline gives a record.
func stepOfEntry(e Entry) Step {
	s := Step{Seq: e.Seq, Time: e.Time, Host: e.Host, Container: e.Container, From: e.From, To: e.To, Text: e.Text}
	s.Kind = e.Type
	if k, ok := stepKinds[e.Type]; ok {
		s.Kind = k
	}
	text := e.Text
	if text == "" {
		text = e.Type // a record with no fields (cleanup_started, task_cleaned) still says what it was
	}
	s.Text = subjectText(s.Container, text)
	return s
}

// subjectText names whose line it is: the container, or the task.
func subjectText(container, text string) string {
	if container != "" {
		return container + " " + text
	}
	return "task " + text
}
