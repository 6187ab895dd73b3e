package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// snapshotVersion is the encoding of Snapshot. A snapshot of another version is refused, and
// the caller replays from the start instead. Version 2 (issue 25) keeps tombstones compact;
// version 1's are read too (tombstoneIn), so an upgraded agent restores its old snapshots.
const snapshotVersion = 2

type snapshot struct {
	Version int    `json:"version"`
	State   *State `json:"state"`
}

// snapshotIn is a snapshot being restored: its tombstones in either shape. The outer
// Tombstones field hides the State's for the decoder, which stays strict about unknown fields.
type snapshotIn struct {
	Version int      `json:"version"`
	State   *stateIn `json:"state"`
}

type stateIn struct {
	*State
	Tombstones map[string]*tombstoneIn `json:"tombstones"`
}

// Snapshot encodes the projection deterministically: maps are written in key order and times
// in UTC, so equal projections give equal bytes.
func (s *State) Snapshot() ([]byte, error) {
	b, err := json.Marshal(snapshot{Version: snapshotVersion, State: s})
	if err != nil {
		return nil, fmt.Errorf("fsm: snapshot at %d: %w", s.LastSeq, err)
	}
	return b, nil
}

// Restore decodes a snapshot and checks it as strictly as a record: every status must be one
// the machines know, every outbox entry must belong to its subject.
func Restore(data []byte) (*State, error) {
	snap := snapshotIn{State: &stateIn{State: &State{}}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return nil, fmt.Errorf("fsm: restore snapshot: %w", err)
	}
	if snap.Version != snapshotVersion && snap.Version != 1 {
		return nil, fmt.Errorf("fsm: restore snapshot: version %d, this agentd reads 1 and %d", snap.Version, snapshotVersion)
	}
	if snap.State == nil || snap.State.State == nil {
		return nil, fmt.Errorf("fsm: restore snapshot: no state")
	}
	s := New()
	*s = *snap.State.State
	s.taskM, s.containerM = newTaskMachine(), newContainerMachine()
	if s.Tasks == nil || snap.State.Tombstones == nil || s.Messages == nil || s.Outbox == nil {
		return nil, fmt.Errorf("fsm: restore snapshot at %d: missing tables", s.LastSeq)
	}
	s.Tombstones = make(map[string]*Tombstone, len(snap.State.Tombstones))
	for arn, in := range snap.State.Tombstones {
		if in == nil || (in.ARN != "" && in.ARN != arn) || arn == "" {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: tombstone %q is damaged", s.LastSeq, arn)
		}
		ts, err := in.tombstone(s, arn)
		if err != nil {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: %w", s.LastSeq, err)
		}
		if ts.StopSeq == 0 || ts.StopSeq > ts.CleanSeq || ts.CleanSeq > s.LastSeq {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: tombstone %q is damaged (stopped at record %d, cleaned at %d)", s.LastSeq, arn, ts.StopSeq, ts.CleanSeq)
		}
		s.Tombstones[arn] = ts
	}
	if s.Images == nil {
		s.Images = map[string]*Image{} // a snapshot from before image collection, or with none
	}
	for id, img := range s.Images {
		if img == nil || img.ID != id {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: image %q is damaged", s.LastSeq, id)
		}
	}
	if err := s.checkRefusals(); err != nil {
		return nil, fmt.Errorf("fsm: restore snapshot at %d: %w", s.LastSeq, err)
	}
	for arn, t := range s.Tasks {
		if t == nil || t.ARN != arn || !t.Known.Valid() || !t.Desired.Valid() || !t.Sent.Valid() || t.Sent.Rank() > t.Known.Rank() {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: task %q is damaged", s.LastSeq, arn)
		}
		for _, c := range t.Containers {
			if c == nil || !c.Known.Valid() || !c.Sent.Valid() || c.Sent.Rank() > c.Known.Rank() {
				return nil, fmt.Errorf("fsm: restore snapshot at %d: a container of task %q is damaged", s.LastSeq, arn)
			}
		}
	}
	s.order = make([]uint64, 0, len(s.Outbox))
	for seq, c := range s.Outbox {
		if c == nil || c.Seq != seq || c.Seq > s.LastSeq {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: outbox entry %d is damaged", s.LastSeq, seq)
		}
		s.order = append(s.order, seq)
	}
	slices.Sort(s.order)
	return s, nil
}
