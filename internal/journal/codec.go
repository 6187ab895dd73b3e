package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/agentd/agentd/internal/event"
)

// codecVersion is the first byte of every encoded record. A record with another version is
// refused by name, never guessed at.
const codecVersion = 1

// maxField bounds any length-prefixed field, so a corrupt length cannot make the decoder
// allocate gigabytes.
const maxField = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encoded layout, version 1 (all integers unsigned varints unless noted):
//
//	version(1 byte) seq time(unix ns, zig-zag varint) type task container body crc32c(4 bytes, big-endian)
//
// The checksum covers the encoded bytes before it, so it survives any change to Go structs.
//
// It appends to dst; the checksum covers only the record's own bytes.
func encodeRecord(dst []byte, seq uint64, t time.Time, typ event.Type, task, container string, body []byte) []byte {
	start := len(dst)
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, seq)
	dst = binary.AppendVarint(dst, t.UnixNano())
	dst = binary.AppendUvarint(dst, uint64(typ))
	dst = appendBytes(dst, []byte(task))
	dst = appendBytes(dst, []byte(container))
	dst = appendBytes(dst, body)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// rawRecord is a decoded envelope whose body is still encoded.
type rawRecord struct {
	seq       uint64
	time      time.Time
	typ       event.Type
	task      string
	container string
	body      []byte
}

// Errors a decoder can name. They are wrapped with the sequence number at fault.
var (
	ErrChecksum    = errors.New("checksum mismatch")
	ErrTruncated   = errors.New("truncated record")
	ErrUnknownType = errors.New("unknown record type")
	ErrVersion     = errors.New("unknown record encoding version")
)

// decodeRaw parses an encoded record without trusting any byte of it. The returned body
// aliases b.
func decodeRaw(b []byte) (rawRecord, error) {
	e, err := decodeEnvelope(b)
	if err != nil {
		return rawRecord{seq: e.Seq, time: e.Time, typ: e.Type}, err
	}
	return rawRecord{seq: e.Seq, time: e.Time, typ: e.Type, task: string(e.Task), container: string(e.Container), body: e.Body}, nil
}

// decodeEnvelope is decodeRaw with every field left aliasing b: nothing is allocated.
func decodeEnvelope(b []byte) (RawRecord, error) {
	var r RawRecord
	if len(b) < 1+4 {
		return r, ErrTruncated
	}
	payload, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(payload, castagnoli) != sum {
		return r, ErrChecksum
	}
	if payload[0] != codecVersion {
		return r, fmt.Errorf("%w %d", ErrVersion, payload[0])
	}
	p := payload[1:]
	var ok bool
	if r.Seq, p, ok = uvarint(p); !ok {
		return r, fmt.Errorf("%w: sequence", ErrTruncated)
	}
	ns, n := binary.Varint(p)
	if n <= 0 {
		return r, fmt.Errorf("%w: time", ErrTruncated)
	}
	p = p[n:]
	r.Time = time.Unix(0, ns).UTC()
	var typ uint64
	if typ, p, ok = uvarint(p); !ok {
		return r, fmt.Errorf("%w: type", ErrTruncated)
	}
	if typ > 0xffff || !event.Type(typ).Known() {
		return r, fmt.Errorf("%w %d", ErrUnknownType, typ)
	}
	r.Type = event.Type(typ)
	if r.Task, p, ok = bytesField(p); !ok {
		return r, fmt.Errorf("%w: task", ErrTruncated)
	}
	if r.Container, p, ok = bytesField(p); !ok {
		return r, fmt.Errorf("%w: container", ErrTruncated)
	}
	if r.Body, p, ok = bytesField(p); !ok {
		return r, fmt.Errorf("%w: body", ErrTruncated)
	}
	if len(p) != 0 {
		return r, fmt.Errorf("%d trailing bytes after body", len(p))
	}
	return r, nil
}

func uvarint(p []byte) (uint64, []byte, bool) {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return 0, p, false
	}
	return v, p[n:], true
}

func bytesField(p []byte) ([]byte, []byte, bool) {
	l, p, ok := uvarint(p)
	if !ok || l > maxField || l > uint64(len(p)) {
		return nil, p, false
	}
	return p[:l], p[l:], true
}

// DecodeRecord decodes one stored record (key = big-endian sequence number) into an event
// record. Every failure names the sequence number and what is wrong.
func DecodeRecord(key, value []byte) (event.Record, error) {
	seq, err := keySeq(key)
	if err != nil {
		return event.Record{}, err
	}
	raw, err := decodeRaw(value)
	if err != nil {
		return event.Record{}, fmt.Errorf("journal: record %d: %w", seq, err)
	}
	if raw.seq != seq {
		return event.Record{}, fmt.Errorf("journal: record %d: holds sequence %d", seq, raw.seq)
	}
	ev, err := event.UnmarshalBody(raw.typ, raw.body)
	if err != nil {
		return event.Record{}, fmt.Errorf("journal: record %d: %w", seq, err)
	}
	return event.Record{Seq: seq, Time: raw.time, Task: raw.task, Container: raw.container, Event: ev}, nil
}

// keySeq reads a record's key, its sequence number in 8 bytes big-endian. A key of another
// length is damage, named as such: a journal is read after incidents, and what reads it names
// damage instead of dying of it.
func keySeq(k []byte) (uint64, error) {
	if len(k) != 8 {
		return 0, fmt.Errorf("journal: record key %x: want 8 bytes, have %d", k, len(k))
	}
	return binary.BigEndian.Uint64(k), nil
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// recordOfTask reports whether encoded record b names task as its subject, reading only the
// envelope up to the task field and checking no checksum: a filter for scans, cheap enough to
// run over every record. A record it cannot parse counts as a match, so the caller decodes it
// fully and reports the damage instead of skipping it.
func recordOfTask(b []byte, task string) bool {
	if len(b) < 1+4 || b[0] != codecVersion {
		return true
	}
	p := b[1 : len(b)-4]
	var ok bool
	if _, p, ok = uvarint(p); !ok { // sequence
		return true
	}
	_, n := binary.Varint(p) // time
	if n <= 0 {
		return true
	}
	p = p[n:]
	if _, p, ok = uvarint(p); !ok { // type
		return true
	}
	name, _, ok := bytesField(p)
	return !ok || string(name) == task
}
