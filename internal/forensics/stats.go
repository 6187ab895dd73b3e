package forensics

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/event"
	"github.com/agentd/agentd/internal/journal"
)

// StatsReport is what an operator sizing a fleet asks of a journal.
type StatsReport struct {
	File            string         `json:"file"`
	FileBytes       int64          `json:"file_bytes"`
	UsedBytes       int64          `json:"used_bytes"`
	Records         int            `json:"records"`
	BytesPerRecord  float64        `json:"bytes_per_record"`
	FirstSeq        uint64         `json:"first_seq"`
	LastSeq         uint64         `json:"last_seq"`
	FirstTime       time.Time      `json:"first_time"`
	LastTime        time.Time      `json:"last_time"`
	ByType          map[string]int `json:"records_by_type"`
	TasksLive       int            `json:"tasks_live"`
	TasksByStatus   map[string]int `json:"tasks_by_status"`
	TasksCleaned    int            `json:"tasks_cleaned"`
	Tombstones      int            `json:"tombstones"`
	Unsent          int            `json:"unsent_changes"`
	OldestUnsent    time.Time      `json:"oldest_unsent_change,omitzero"`
	OldestUnsentAge string         `json:"oldest_unsent_age,omitempty"`
	AgentStarts     int            `json:"agent_starts"`
	Snapshots       []uint64       `json:"snapshots_at"`
	Cuts            [][2]uint64    `json:"compaction_cuts"`
}

// Stats reads the whole journal once and replays it to its end.
func Stats(j *journal.Journal) (StatsReport, error) {
	r := StatsReport{File: j.Path(), ByType: map[string]int{}, TasksByStatus: map[string]int{}}
	if st, err := os.Stat(j.Path()); err == nil {
		r.FileBytes = st.Size()
	}
	var err error
	if r.UsedBytes, err = j.Size(); err != nil {
		return r, err
	}
	err = j.Iterate(1, func(rec event.Record) error {
		if r.Records == 0 {
			r.FirstSeq, r.FirstTime = rec.Seq, rec.Time
		}
		r.Records++
		r.LastSeq, r.LastTime = rec.Seq, rec.Time
		r.ByType[rec.Type().String()]++
		switch rec.Event.(type) {
		case *event.TaskCleaned:
			r.TasksCleaned++
		case *event.AgentStarted:
			r.AgentStarts++
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	if r.Records > 0 {
		r.BytesPerRecord = float64(r.UsedBytes) / float64(r.Records)
	}
	rep, err := Replay(j, 0)
	if err != nil {
		return r, err
	}
	st := rep.State
	r.TasksLive, r.Tombstones, r.Unsent = len(st.Tasks), len(st.Tombstones), st.OutboxLen()
	for _, t := range st.Tasks {
		r.TasksByStatus[string(t.Known)]++
	}
	if o := st.OldestUnsent(); !o.IsZero() {
		r.OldestUnsent = o
		r.OldestUnsentAge = r.LastTime.Sub(o).Round(time.Millisecond).String() + " before the last record"
	}
	if r.Snapshots, err = j.SnapshotSeqs(); err != nil {
		return r, err
	}
	r.Cuts = j.Holes()
	return r, nil
}

// Write prints the report for people.
func (r StatsReport) Write(w io.Writer) {
	fmt.Fprintf(w, "file          %s: %d bytes on disk, %d used, %.0f bytes per record\n", r.File, r.FileBytes, r.UsedBytes, r.BytesPerRecord)
	fmt.Fprintf(w, "records       %d, sequence %d..%d, %s .. %s (%s)\n", r.Records, r.FirstSeq, r.LastSeq,
		r.FirstTime.UTC().Format(time.RFC3339Nano), r.LastTime.UTC().Format(time.RFC3339Nano), r.LastTime.Sub(r.FirstTime).Round(time.Millisecond))
	types := make([]string, 0, len(r.ByType))
	for t := range r.ByType {
		types = append(types, t)
	}
	slices.SortFunc(types, func(a, b string) int {
		if r.ByType[a] != r.ByType[b] {
			return r.ByType[b] - r.ByType[a]
		}
		return strings.Compare(a, b)
	})
	for _, t := range types {
		fmt.Fprintf(w, "  %-24s %d\n", t, r.ByType[t])
	}
	statuses := make([]string, 0, len(r.TasksByStatus))
	for s, n := range r.TasksByStatus {
		statuses = append(statuses, fmt.Sprintf("%s %d", s, n))
	}
	slices.Sort(statuses)
	fmt.Fprintf(w, "tasks         %d live (%s), %d cleaned, %d tombstones kept\n", r.TasksLive, strings.Join(statuses, ", "), r.TasksCleaned, r.Tombstones)
	fmt.Fprintf(w, "outbox        %d changes unsent", r.Unsent)
	if r.OldestUnsentAge != "" {
		fmt.Fprintf(w, ", oldest from %s (%s)", r.OldestUnsent.UTC().Format(time.RFC3339Nano), r.OldestUnsentAge)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "agent starts  %d\n", r.AgentStarts)
	fmt.Fprintf(w, "snapshots     at %v\n", r.Snapshots)
	fmt.Fprintf(w, "compaction    %d cuts %v\n", len(r.Cuts), r.Cuts)
}
