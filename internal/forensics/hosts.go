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
	lines   []int32 // the line of each entry
}

// OpenHostFiles opens every file read-only, telling journals from exports by their first
// byte (an export is JSON lines). A file given twice (the same file, or the same bytes under
// another name) is read once, and warn (nil: not told) says so. The close function closes
// them all.
func OpenHostFiles(ctx context.Context, paths []string, warn func(string)) ([]*HostFile, func(), error) {
	var out []*HostFile
	closeAll := func() {
		for _, h := range out {
			if h.journal != nil {
				h.journal.Close()
			}
		}
	}
	var same sameFiles
	for _, p := range paths {
		if earlier, how, err := same.seen(p); err != nil {
			closeAll()
			return nil, nil, err
		} else if earlier != "" {
			if warn != nil {
				warn(fmt.Sprintf("%s is %s as %s: read once", p, how, earlier))
			}
			continue
		}
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
		entries, lines, err := readExport(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &HostFile{Path: path, entries: entries, lines: lines}, nil
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

// readExport reads an export: one JSON Entry a line, and the line of each. A bad line is an
// error naming it.
func readExport(r io.Reader) ([]Entry, []int32, error) {
	var out []Entry
	var lines []int32
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, nil, fmt.Errorf("line %d: not an export entry: %w", n, err)
		}
		if e.Host == "" || e.Type == "" {
			return nil, nil, fmt.Errorf("line %d: an export entry needs host and type", n)
		}
		out = append(out, e)
		lines = append(lines, int32(n))
	}
	return out, lines, sc.Err()
}

// taskRecords gathers every version of task's records in the files: the journals' first, so
// that of a record both a journal and an export hold, the journal's is the one kept (it also
// gives the steps of what its containers waited for).
func taskRecords(files []*HostFile, task string) (*recordSet, error) {
	set := newRecordSet()
	for pass := range 2 {
		for i, h := range files {
			if (h.journal != nil) != (pass == 0) {
				continue
			}
			if h.journal != nil {
				err := h.journal.TaskRecords(task, func(r event.Record) error {
					set.add(EntryOf(h.Host, r), origin{file: int32(i)})
					return nil
				})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", h.Path, err)
				}
				continue
			}
			mine := 0
			for _, e := range h.entries {
				if e.Task == task {
					mine++
				}
			}
			set.grow(mine)
			for k, e := range h.entries {
				if e.Task == task {
					set.add(e, origin{file: int32(i), line: h.lines[k]})
				}
			}
		}
	}
	return set, nil
}

// whereIn names an origin in files: the file, and an export's line.
func whereIn(files []*HostFile) func(origin) string {
	return func(o origin) string {
		if o.line > 0 {
			return fmt.Sprintf("%s line %d", files[o.file].Path, o.line)
		}
		return files[o.file].Path
	}
}

// TaskEntries is every entry of task in the files, merged by time (ties: host, then seq):
// a record several files hold alike once, one they hold differently in every version, marked,
// each such record told through warn.
func TaskEntries(files []*HostFile, task string, warn func(string)) ([]Entry, error) {
	set, err := taskRecords(files, task)
	if err != nil {
		return nil, err
	}
	out, warnings := set.result(whereIn(files))
	tell(warn, warnings)
	sortEntries(out)
	return out, nil
}

func tell(warn func(string), warnings []string) {
	for _, w := range warnings {
		if warn != nil {
			warn(w)
		}
	}
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
		event.Printable(e.Type), subj, event.PrintableText(e.Text)), " ") + conflictNote(e.Conflict)
}

// conflictNote marks a line whose record another source gives differently.
func conflictNote(conflict string) string {
	if conflict == "" {
		return ""
	}
	return "  [CONFLICT: " + event.PrintableText(conflict) + "]"
}

// FleetTimeline is one task's life across hosts: each journal's own timeline (BuildTimeline),
// and each export's entries as steps, every step naming its host, merged by time. Records
// several files hold are treated as TaskEntries treats them (told through warn).
func FleetTimeline(files []*HostFile, task string, warn func(string)) (*Timeline, error) {
	set, err := taskRecords(files, task)
	if err != nil {
		return nil, err
	}
	kept, warnings := set.result(whereIn(files))
	tell(warn, warnings)
	conflict := map[fileKey]string{}
	exported := make([][]int32, len(files)) // the entries kept of each export
	for v, e := range kept {
		o := set.origins[v]
		if e.Conflict != "" {
			conflict[fileKey{o.file, keyOf(e)}] = e.Conflict
		}
		if files[o.file].journal == nil {
			exported[o.file] = append(exported[o.file], int32(v))
		}
	}
	tl := &Timeline{Task: task}
	steps := make([]Step, 0, len(kept))
	shown := map[Step]bool{} // a step two journals of one host both give (a copy and the journal) once
	for i, h := range files {
		if h.journal == nil {
			for _, v := range exported[i] {
				e := kept[v]
				steps = append(steps, stepOfEntry(e))
				if e.Type == "task_added" {
					tl.addContainers(e.Host, nil)
				}
				if e.Container != "" {
					tl.addContainers(e.Host, []string{e.Container})
				}
			}
			continue
		}
		one, err := BuildTimeline(h.journal, task)
		if err != nil {
			if len(files) > 1 && strings.Contains(err.Error(), "no record in the journal") {
				continue // the task never ran on this host
			}
			return nil, fmt.Errorf("%s: %w", h.Path, err)
		}
		for _, s := range one.Steps {
			k := fileKey{int32(i), recordKey{host: h.Host, seq: s.Seq}}
			if set.dropped[k] {
				continue // a record an earlier file holds alike: its steps come from there
			}
			s.Host, s.Conflict = h.Host, conflict[k]
			if s.Conflict == "" {
				if shown[s] {
					continue
				}
				shown[s] = true
			}
			steps = append(steps, s)
		}
		tl.addContainers(h.Host, one.Containers)
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
	if tl.seen == nil {
		tl.seen, tl.lanes = map[[2]string]bool{}, map[string][]string{}
	}
	if !tl.seen[[2]string{host, ""}] {
		tl.seen[[2]string{host, ""}] = true
		tl.Hosts = append(tl.Hosts, host)
	}
	for _, n := range names {
		if !tl.seen[[2]string{host, n}] {
			tl.seen[[2]string{host, n}] = true
			tl.lanes[host] = append(tl.lanes[host], n)
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
	s := Step{Seq: e.Seq, Time: e.Time, Host: e.Host, Container: e.Container, From: e.From, To: e.To, Text: e.Text, Conflict: e.Conflict}
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
