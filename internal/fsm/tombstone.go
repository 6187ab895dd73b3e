package fsm

import (
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// Tombstones: what a cleaned task leaves behind. It promises that a tombstone holds enough to
// give back, on a re-send, exactly the final changes the task reported — same ids, statuses,
// exit codes, reasons and times — and nothing else, so that remembering a task for the
// retention costs a few hundred bytes, not its history (issue 25).

// tombstone is what task t leaves when record rec cleans it.
func (s *State) tombstone(t *Task, rec event.Record) *Tombstone {
	ts := &Tombstone{Reason: s.intern(t.Reason), StoppedNs: toNs(t.StoppedAt), CleanedNs: toNs(rec.Time),
		CleanSeq: rec.Seq, StopSeq: t.StopSeq}
	n := 0
	for _, c := range t.Containers {
		if c.StopSeq != 0 {
			n++
		}
	}
	if n > 0 {
		ts.Stops = make([]FinalStop, 0, n)
	}
	for _, c := range t.Containers {
		if c.StopSeq == 0 {
			continue
		}
		f := FinalStop{Container: s.intern(c.Name), Reason: s.intern(c.Reason), Seq: c.StopSeq, AtNs: toNs(c.StoppedAt)}
		if c.ExitCode != nil {
			f.Exit, f.HasExit = int64(*c.ExitCode), true
		}
		ts.Stops = append(ts.Stops, f)
	}
	return ts
}

// tombstoneFinal are a tombstoned task's final changes — each container's STOPPED, then the
// task's — as they were first reported (finalChanges, for the live task).
func (s *State) tombstoneFinal(arn string, ts *Tombstone) []Change {
	out := make([]Change, 0, len(ts.Stops)+1)
	for _, f := range ts.Stops {
		c := Change{ID: s.finalID(f.Seq, f.BareID), Seq: f.Seq, Task: arn, Container: f.Container,
			Status: event.StatusStopped, Reason: f.Reason, At: fromNs(f.AtNs)}
		if f.HasExit {
			code := int(f.Exit)
			c.ExitCode = &code
		}
		out = append(out, c)
	}
	return append(out, Change{ID: s.finalID(ts.StopSeq, ts.BareID), Seq: ts.StopSeq, Task: arn,
		Status: event.StatusStopped, Reason: ts.Reason, At: ts.StoppedAt()})
}

// finalID is the id a final change was reported under.
func (s *State) finalID(seq uint64, bare bool) string {
	if bare {
		return "c-" + strconv.FormatUint(seq, 10)
	}
	return s.ChangeID(seq)
}

// maxInterned bounds the intern table: reasons and container names repeat across tasks
// ("exited", "app"), but one that embeds a task's own text must not grow the table forever.
const maxInterned = 4096

// intern returns the table's copy of v, so that tombstones share the few distinct reasons
// and container names instead of each holding its own. Memory only: never serialised.
func (s *State) intern(v string) string {
	if v == "" {
		return ""
	}
	if got, ok := s.interned[v]; ok {
		return got
	}
	if s.interned == nil {
		s.interned = map[string]string{}
	}
	if len(s.interned) < maxInterned {
		s.interned[v] = v
	}
	return v
}

// tombstoneIn is a tombstone as a snapshot holds it: this shape, or the first one (snapshot
// version 1, before issue 25), which kept every final change whole, with its id.
type tombstoneIn struct {
	Tombstone
	ARN       string         `json:"arn"`
	Family    string         `json:"family"`
	StoppedAt time.Time      `json:"stopped_at"`
	CleanedAt time.Time      `json:"cleaned_at"`
	Final     []Change       `json:"final"`
	Exits     map[string]int `json:"exits"`
}

// tombstone converts what the snapshot held; an id the tombstone cannot give back as it was
// first reported is an error naming the task, and the snapshot is refused.
func (in *tombstoneIn) tombstone(s *State, arn string) (*Tombstone, error) {
	ts := in.Tombstone
	ts.Reason = s.intern(ts.Reason)
	for i := range ts.Stops {
		ts.Stops[i].Container, ts.Stops[i].Reason = s.intern(ts.Stops[i].Container), s.intern(ts.Stops[i].Reason)
	}
	if in.Final == nil && in.CleanedAt.IsZero() {
		return &ts, nil
	}
	// The first shape: the last final change is the task's, the others its containers'.
	if len(in.Final) == 0 || in.Final[len(in.Final)-1].Container != "" {
		return nil, fmt.Errorf("tombstone %q: its final changes do not end with the task's STOPPED", arn)
	}
	ts.StoppedNs, ts.CleanedNs, ts.Stops = toNs(in.StoppedAt), toNs(in.CleanedAt), nil
	for i, c := range in.Final {
		bare, err := s.bareID(c)
		if err != nil {
			return nil, fmt.Errorf("tombstone %q: %w", arn, err)
		}
		if i == len(in.Final)-1 {
			ts.StopSeq, ts.BareID = c.Seq, bare
			if ts.StoppedNs == 0 {
				ts.StoppedNs = toNs(c.At)
			}
			break
		}
		f := FinalStop{Container: s.intern(c.Container), Reason: s.intern(c.Reason), Seq: c.Seq, AtNs: toNs(c.At), BareID: bare}
		if c.ExitCode != nil {
			f.Exit, f.HasExit = int64(*c.ExitCode), true
		}
		ts.Stops = append(ts.Stops, f)
	}
	return &ts, nil
}

// bareID says whether a first-shape final change's id was made without the journal id; an id
// of neither form is an error.
func (s *State) bareID(c Change) (bool, error) {
	switch c.ID {
	case s.ChangeID(c.Seq):
		return false, nil
	case "c-" + strconv.FormatUint(c.Seq, 10):
		return true, nil
	}
	return false, fmt.Errorf("final change %q is not the id of record %d", c.ID, c.Seq)
}
