package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// snapshotVersion is the encoding of Snapshot. A snapshot of another version is refused, and
// the caller replays from the start instead.
const snapshotVersion = 1

type snapshot struct {
	Version int    `json:"version"`
	State   *State `json:"state"`
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
	var snap snapshot
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return nil, fmt.Errorf("fsm: restore snapshot: %w", err)
	}
	if snap.Version != snapshotVersion {
		return nil, fmt.Errorf("fsm: restore snapshot: version %d, this agentd reads %d", snap.Version, snapshotVersion)
	}
	if snap.State == nil {
		return nil, fmt.Errorf("fsm: restore snapshot: no state")
	}
	s := New()
	*s = *snap.State
	s.taskM, s.containerM = newTaskMachine(), newContainerMachine()
	if s.Tasks == nil || s.Tombstones == nil || s.Messages == nil || s.Outbox == nil {
		return nil, fmt.Errorf("fsm: restore snapshot at %d: missing tables", s.LastSeq)
	}
	if s.Images == nil {
		s.Images = map[string]*Image{} // a snapshot from before image collection, or with none
	}
	for id, img := range s.Images {
		if img == nil || img.ID != id {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: image %q is damaged", s.LastSeq, id)
		}
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
