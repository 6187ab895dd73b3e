package fsm

import (
	"fmt"
	"slices"
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
	f := tombstoneFields{Reason: t.Reason, StoppedNs: toNs(t.StoppedAt), CleanedNs: toNs(rec.Time),
		CleanSeq: rec.Seq, StopSeq: t.StopSeq, Messages: t.Messages}
	for _, c := range t.Containers {
		if c.StopSeq == 0 {
			continue
		}
		stop := FinalStop{Container: c.Name, Reason: c.Reason, Seq: c.StopSeq, AtNs: toNs(c.StoppedAt)}
		if c.ExitCode != nil {
			stop.Exit, stop.HasExit = int64(*c.ExitCode), true
		}
		f.Stops = append(f.Stops, stop)
	}
	return s.names.pack(f)
}

// tombstoneFinal are a tombstoned task's final changes — each container's STOPPED, then the
// task's — as they were first reported (finalChanges, for the live task).
func (s *State) tombstoneFinal(arn string, ts *Tombstone) []Change {
	f := s.names.unpack(ts)
	out := make([]Change, 0, len(f.Stops)+1)
	for _, stop := range f.Stops {
		c := Change{ID: s.finalID(stop.Seq, stop.BareID), Seq: stop.Seq, Task: arn, Container: stop.Container,
			Status: event.StatusStopped, Reason: stop.Reason, At: fromNs(stop.AtNs)}
		if stop.HasExit {
			code := int(stop.Exit)
			c.ExitCode = &code
		}
		out = append(out, c)
	}
	return append(out, Change{ID: s.finalID(f.StopSeq, f.BareID), Seq: f.StopSeq, Task: arn,
		Status: event.StatusStopped, Reason: f.Reason, At: fromNs(f.StoppedNs)})
}

// heldMessage says whether the payload of message id held task arn, live or tombstoned: a
// payload's id leaves the table of ids when a task it held is cleaned (tombstoneFields.Messages),
// and a re-send of it holds that task again.
func (s *State) heldMessage(arn string, ids ...string) bool {
	var held []string
	if t, live := s.Tasks[arn]; live {
		held = t.Messages
	} else if ts, tomb := s.Tombstones[arn]; tomb {
		held = s.names.unpack(ts).Messages
	}
	for _, id := range ids {
		if id != "" && slices.Contains(held, id) {
			return true
		}
	}
	return false
}

// TombstoneReason is the tombstoned task's final STOPPED reason.
func (s *State) TombstoneReason(ts *Tombstone) string { return s.names.unpack(ts).Reason }

// finalID is the id a final change was reported under.
func (s *State) finalID(seq uint64, bare bool) string {
	if bare {
		return "c-" + strconv.FormatUint(seq, 10)
	}
	return s.ChangeID(seq)
}

// tombstoneIn is a tombstone as a snapshot holds it: this shape, or the first one (snapshot
// version 1, before issue 25), which kept every final change whole, with its id.
type tombstoneIn struct {
	tombstoneFields
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
	ts := in.tombstoneFields
	if in.Final == nil && in.CleanedAt.IsZero() {
		return s.names.pack(ts), nil
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
		f := FinalStop{Container: c.Container, Reason: c.Reason, Seq: c.Seq, AtNs: toNs(c.At), BareID: bare}
		if c.ExitCode != nil {
			f.Exit, f.HasExit = int64(*c.ExitCode), true
		}
		ts.Stops = append(ts.Stops, f)
	}
	return s.names.pack(ts), nil
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

// RememberedMessages are the ids of the payloads the projection recognises a re-send of, in
// order: those in its table and those its tombstones hold.
func (s *State) RememberedMessages() []string {
	out := make([]string, 0, len(s.Messages))
	for m := range s.Messages {
		out = append(out, m)
	}
	for _, ts := range s.Tombstones {
		out = append(out, s.names.unpack(ts).Messages...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
