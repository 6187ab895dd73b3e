package fsm

import "encoding/binary"

// Tombstone packing: a tombstone unpacks to exactly the fields it was packed from, and a
// one-container tombstone packs into a few dozen bytes (issue 41: on the real mix, a payload
// a task, a remembered task cost 420–577 bytes of heap, 144 of them the tombstone's two
// structs of numbers and string headers). Sequence numbers and times are varints relative to
// the cleaning record's; reasons and container names are an index into the projection's
// table of names (names), or their bytes when the table is full.

// tombstoneFields is a tombstone unpacked — and its shape in a snapshot (version 3): the
// fields and their order are the snapshot's, so a snapshot's bytes do not depend on how a
// tombstone is held.
type tombstoneFields struct {
	Reason    string      `json:"reason,omitempty"` // the task's final STOPPED reason
	StoppedNs int64       `json:"stopped_ns"`       // when the task's STOPPED was journaled
	CleanedNs int64       `json:"cleaned_ns"`
	CleanSeq  uint64      `json:"clean_seq"`
	StopSeq   uint64      `json:"stop_seq"` // the record of the task's STOPPED: its change's id
	Stops     []FinalStop `json:"stops,omitempty"`
	BareID    bool        `json:"bare_id,omitempty"` // the task's STOPPED id is "c-<seq>" (FinalStop.BareID)
	// HistoryDropped: its records went before the retention ended, to keep the journal within
	// --journal-max-bytes (event.CompactionDone.Early); the tombstone alone answers for it.
	HistoryDropped bool `json:"history_dropped,omitempty"`
	// Messages are the payloads that held the task when it was cleaned (Task.Messages): their
	// ids move here from the projection's table, since a re-send of one holds this task and
	// is recognised by it (heldMessage) — one id a task, where every task comes in a payload of
	// its own, costs its bytes, not a table entry.
	Messages []string `json:"messages,omitempty"`
}

// The first byte of a packed tombstone: its flags.
const (
	packedBareID byte = 1 << iota
	packedHistoryDropped
)

// Each container's final stop has a flags byte too.
const (
	stopHasExit byte = 1 << iota
	stopBareID
)

// pack makes the tombstone of f. names may be nil: every string is then kept as its bytes.
func (n *names) pack(f tombstoneFields) *Tombstone {
	b := make([]byte, 0, 48)
	var flags byte
	if f.BareID {
		flags |= packedBareID
	}
	if f.HistoryDropped {
		flags |= packedHistoryDropped
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, int64(f.CleanSeq-f.StopSeq))
	b = binary.AppendVarint(b, f.CleanedNs-f.StoppedNs)
	b = n.appendName(b, f.Reason)
	b = binary.AppendUvarint(b, uint64(len(f.Stops)))
	for _, s := range f.Stops {
		var sf byte
		if s.HasExit {
			sf |= stopHasExit
		}
		if s.BareID {
			sf |= stopBareID
		}
		b = append(b, sf)
		b = n.appendName(b, s.Container)
		b = n.appendName(b, s.Reason)
		b = binary.AppendVarint(b, int64(f.CleanSeq-s.Seq))
		b = binary.AppendVarint(b, f.CleanedNs-s.AtNs)
		if s.HasExit {
			b = binary.AppendVarint(b, s.Exit)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(f.Messages)))
	for _, m := range f.Messages {
		b = binary.AppendUvarint(b, uint64(len(m)))
		b = append(b, m...)
	}
	return &Tombstone{CleanSeq: f.CleanSeq, CleanedNs: f.CleanedNs, packed: string(b)}
}

// unpack gives back the fields ts was packed from.
func (n *names) unpack(ts *Tombstone) tombstoneFields {
	r := packedReader{b: ts.packed}
	flags := r.byte()
	f := tombstoneFields{CleanSeq: ts.CleanSeq, CleanedNs: ts.CleanedNs,
		BareID: flags&packedBareID != 0, HistoryDropped: flags&packedHistoryDropped != 0}
	f.StopSeq = ts.CleanSeq - uint64(r.varint())
	f.StoppedNs = ts.CleanedNs - r.varint()
	f.Reason = n.readName(&r)
	if k := r.uvarint(); k > 0 && k <= uint64(len(r.b)) { // each stop takes a byte at least
		f.Stops = make([]FinalStop, 0, k)
		for range k {
			sf := r.byte()
			s := FinalStop{HasExit: sf&stopHasExit != 0, BareID: sf&stopBareID != 0}
			s.Container, s.Reason = n.readName(&r), n.readName(&r)
			s.Seq = ts.CleanSeq - uint64(r.varint())
			s.AtNs = ts.CleanedNs - r.varint()
			if s.HasExit {
				s.Exit = r.varint()
			}
			f.Stops = append(f.Stops, s)
		}
	}
	if k := r.uvarint(); k > 0 && k <= uint64(len(r.b)) { // each id takes a byte at least
		f.Messages = make([]string, 0, k)
		for range k {
			f.Messages = append(f.Messages, r.bytes(r.uvarint()))
		}
	}
	return f
}

// packedStop reads what a tombstone's prefix holds: its flags, and its task's STOPPED.
func (ts *Tombstone) packedStop() (flags byte, stopSeq uint64, stoppedNs int64) {
	r := packedReader{b: ts.packed}
	flags = r.byte()
	stopSeq = ts.CleanSeq - uint64(r.varint())
	return flags, stopSeq, ts.CleanedNs - r.varint()
}

// maxNames bounds the table of names: reasons and container names repeat across tasks
// ("exited", "app"), but one that embeds a task's own text must not grow the table forever.
const maxNames = 4096

// names is the projection's table of the strings tombstones share, each kept once: a packed
// tombstone holds a name's index (a byte or two) instead of a 16-byte string header. Memory
// only: never serialised, and its indices depend on the order names came in, so a packed
// tombstone means something only to the projection that packed it.
type names struct {
	list  []string
	index map[string]uint64
}

// intern returns the table's copy of v, so that what keeps a name shares its bytes.
func (n *names) intern(v string) string {
	if i, ok := n.add(v); ok {
		return n.list[i]
	}
	return v
}

// add finds or adds v; false: v is empty, or the table is full and v not in it.
func (n *names) add(v string) (uint64, bool) {
	if n == nil || v == "" {
		return 0, false
	}
	if i, ok := n.index[v]; ok {
		return i, true
	}
	if len(n.list) >= maxNames {
		return 0, false
	}
	if n.index == nil {
		n.index = map[string]uint64{}
	}
	n.index[v] = uint64(len(n.list))
	n.list = append(n.list, v)
	return uint64(len(n.list) - 1), true
}

// appendName appends v as 0 (empty), 2·index+1 (in the table) or 2·length followed by its
// bytes (not in the table).
func (n *names) appendName(b []byte, v string) []byte {
	if v == "" {
		return append(b, 0)
	}
	if i, ok := n.add(v); ok {
		return binary.AppendUvarint(b, i<<1|1)
	}
	b = binary.AppendUvarint(b, uint64(len(v))<<1)
	return append(b, v...)
}

func (n *names) readName(r *packedReader) string {
	x := r.uvarint()
	switch {
	case x == 0:
		return ""
	case x&1 == 1:
		if i := x >> 1; n != nil && i < uint64(len(n.list)) {
			return n.list[i]
		}
		return ""
	}
	return r.bytes(x >> 1)
}

// packedReader reads a packed tombstone; past its end it reads zeros (a packed tombstone is
// only ever made by pack, so that never happens, and never panics if it did).
type packedReader struct{ b string }

func (r *packedReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *packedReader) uvarint() uint64 {
	v, k := binary.Uvarint([]byte(r.b[:min(len(r.b), binary.MaxVarintLen64)]))
	if k <= 0 {
		r.b = ""
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *packedReader) varint() int64 {
	v, k := binary.Varint([]byte(r.b[:min(len(r.b), binary.MaxVarintLen64)]))
	if k <= 0 {
		r.b = ""
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *packedReader) bytes(k uint64) string {
	k = min(k, uint64(len(r.b)))
	v := r.b[:k]
	r.b = r.b[k:]
	return v
}
