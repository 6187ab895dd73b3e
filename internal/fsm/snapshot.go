package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// snapshotVersion is the encoding of Snapshot. A snapshot of another version is refused, and
// the caller replays from the start instead. Version 2 (issue 25) keeps tombstones compact;
// version 3 (issue 41) adds the ids of the payloads that held a tombstoned task; versions 1's
// and 2's are read too (tombstoneIn), so an upgraded agent restores its old snapshots.
const snapshotVersion = 3

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
	var b []byte
	if _, err := s.WriteSnapshot(func(p []byte) error { b = append(b, p...); return nil }); err != nil {
		return nil, err
	}
	return b, nil
}

// WriteSnapshot hands Snapshot's bytes to write, piece by piece, and returns how many it
// handed over; the first error of write ends it. They are exactly
// json.Marshal's of the whole snapshot, but the projection's tables (tasks, tombstones,
// messages, outbox) are encoded an entry at a time, so the encoding never holds more than one
// entry: marshalled whole, a snapshot of 20,000 live tasks was a 25 MB buffer, half of the
// agent's live heap at the peak of a burst (issue 25), though stored compressed it is 1 MB.
func (s *State) WriteSnapshot(write func([]byte) error) (int64, error) {
	sw := &snapshotWriter{w: write}
	// The state without its tables, marshalled as usual, says where each table goes: each
	// nil table is written as its key and null, which no string value can contain (a quote
	// inside a string is escaped).
	head := *s
	head.Tasks, head.Tombstones, head.Messages, head.Outbox = nil, nil, nil, nil
	b, err := json.Marshal(snapshot{Version: snapshotVersion, State: &head})
	if err != nil {
		return sw.n, fmt.Errorf("fsm: snapshot at %d: %w", s.LastSeq, err)
	}
	tables := []struct {
		key   string
		write func()
	}{
		{`"tasks":`, func() { writeTable(sw, s.Tasks, keyText, asIs) }},
		{`"tombstones":`, func() { writeTable(sw, s.Tombstones, keyText, s.names.unpack) }},
		{`"messages":`, func() { writeTable(sw, s.Messages, keyText, asIs) }},
		// encoding/json orders a map's keys by their text, numbers too.
		{`"outbox":`, func() { writeTable(sw, s.Outbox, func(k uint64) string { return strconv.FormatUint(k, 10) }, asIs) }},
	}
	for _, t := range tables {
		at := bytes.Index(b, []byte(t.key+"null"))
		if at < 0 {
			return sw.n, fmt.Errorf("fsm: snapshot at %d: no %s in the state's encoding", s.LastSeq, t.key)
		}
		sw.write(b[:at+len(t.key)])
		t.write()
		b = b[at+len(t.key)+len("null"):]
	}
	sw.write(b)
	if sw.err != nil {
		return sw.n, fmt.Errorf("fsm: snapshot at %d: %w", s.LastSeq, sw.err)
	}
	return sw.n, nil
}

// snapshotWriter is WriteSnapshot's output: the bytes written and the first error.
type snapshotWriter struct {
	w   func([]byte) error
	n   int64
	err error
}

func (sw *snapshotWriter) write(b []byte) {
	if sw.err != nil {
		return
	}
	if sw.err = sw.w(b); sw.err == nil {
		sw.n += int64(len(b))
	}
}

func keyText(k string) string { return k }
func asIs[V any](v V) V       { return v }

// writeTable writes m as json.Marshal does (null when nil, else its entries ordered by key
// text), marshalling one entry at a time, each as value gives it.
func writeTable[K comparable, V, E any](sw *snapshotWriter, m map[K]V, text func(K) string, value func(V) E) {
	if m == nil {
		sw.write([]byte("null"))
		return
	}
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b K) int { return strings.Compare(text(a), text(b)) })
	sw.write([]byte("{"))
	for i, k := range keys {
		if i > 0 {
			sw.write([]byte(","))
		}
		kb, err := json.Marshal(text(k))
		if err == nil {
			sw.write(kb)
			sw.write([]byte(":"))
			var vb []byte
			vb, err = json.Marshal(value(m[k]))
			sw.write(vb)
		}
		if err != nil && sw.err == nil {
			sw.err = err
		}
	}
	sw.write([]byte("}"))
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
	if snap.Version < 1 || snap.Version > snapshotVersion {
		return nil, fmt.Errorf("fsm: restore snapshot: version %d, this agentd reads 1 to %d", snap.Version, snapshotVersion)
	}
	if snap.State == nil || snap.State.State == nil {
		return nil, fmt.Errorf("fsm: restore snapshot: no state")
	}
	s := New()
	*s = *snap.State.State
	s.taskM, s.containerM, s.names = newTaskMachine(), newContainerMachine(), &names{}
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
		if stop := ts.StopSeq(); stop == 0 || stop > ts.CleanSeq || ts.CleanSeq > s.LastSeq {
			return nil, fmt.Errorf("fsm: restore snapshot at %d: tombstone %q is damaged (stopped at record %d, cleaned at %d)", s.LastSeq, arn, stop, ts.CleanSeq)
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
