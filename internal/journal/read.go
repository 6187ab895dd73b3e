package journal

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
)

// Iterate calls fn for each record with sequence number ≥ from, in order, within one read
// transaction (a consistent view). It stops at the first error, fn's or a decoding one, and
// returns it. A sequence gap that compaction did not record is an error naming the gap.
func (j *Journal) Iterate(from uint64, fn func(event.Record) error) error {
	return j.db.View(func(tx *bolt.Tx) error { return j.iterateTx(tx, from, 0, fn) })
}

// IterateRange is Iterate bounded to sequence numbers ≤ to (0: no bound).
func (j *Journal) IterateRange(from, to uint64, fn func(event.Record) error) error {
	return j.db.View(func(tx *bolt.Tx) error { return j.iterateTx(tx, from, to, fn) })
}

func (j *Journal) iterateTx(tx *bolt.Tx, from, to uint64, fn func(event.Record) error) error {
	return j.iterateRawTx(tx, from, to, func(k []byte, r RawRecord) error {
		if err := checkKey(k, r.Seq); err != nil {
			return err
		}
		ev, err := r.Event()
		if err != nil {
			return err
		}
		return fn(event.Record{Seq: r.Seq, Time: r.Time, Task: string(r.Task), Container: string(r.Container), Event: ev})
	})
}

// checkKey is DecodeRecord's check that a record is stored under its own sequence number.
func checkKey(k []byte, seq uint64) error {
	at, err := keySeq(k)
	if err != nil {
		return err
	}
	if at != seq {
		return fmt.Errorf("journal: record %d: holds sequence %d", at, seq)
	}
	return nil
}

// RawRecord is a stored record whose event is still encoded, its checksum verified: what a
// reader that only re-encodes records (the OTLP shipper) needs, without decoding every body
// and allocating every field. Task, Container and Body point into the file's mapping: they
// are valid only during the callback that got them, and must not be modified.
type RawRecord struct {
	Seq                   uint64
	Time                  time.Time
	Type                  event.Type
	Task, Container, Body []byte
}

// Event decodes the record's event.
func (r RawRecord) Event() (event.Event, error) {
	ev, err := event.UnmarshalBody(r.Type, r.Body)
	if err != nil {
		return nil, fmt.Errorf("journal: record %d: %w", r.Seq, err)
	}
	return ev, nil
}

// IterateRawRange is IterateRange with the records' events left encoded (RawRecord): one read
// transaction, the same checks (checksums, sequence continuity), nothing allocated a record.
func (j *Journal) IterateRawRange(from, to uint64, fn func(RawRecord) error) error {
	return j.db.View(func(tx *bolt.Tx) error {
		return j.iterateRawTx(tx, from, to, func(k []byte, r RawRecord) error {
			if err := checkKey(k, r.Seq); err != nil {
				return err
			}
			return fn(r)
		})
	})
}

// iterateRawTx walks the records from..to (0: no bound), checking the envelope's checksum and
// the sequence's continuity; fn gets each record's key and envelope.
func (j *Journal) iterateRawTx(tx *bolt.Tx, from, to uint64, fn func(k []byte, r RawRecord) error) error {
	holes, err := loadHoles(tx)
	if err != nil {
		return err
	}
	c := tx.Bucket(bucketRecords).Cursor()
	var prev uint64
	for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
		r, err := decodeEnvelope(v)
		if err != nil {
			if len(k) == 8 {
				return fmt.Errorf("journal: record %d: %w", binary.BigEndian.Uint64(k), err)
			}
			return fmt.Errorf("journal: record key %x: %w", k, err)
		}
		if to != 0 && r.Seq > to {
			return nil
		}
		if prev != 0 && r.Seq != prev+1 && !holesCover(holes, prev+1, r.Seq-1) {
			return fmt.Errorf("journal: record %d: sequence gap after %d (records %d..%d missing, not compacted)", r.Seq, prev, prev+1, r.Seq-1)
		}
		prev = r.Seq
		if err := fn(k, r); err != nil {
			return err
		}
	}
	return nil
}

// Get reads one record.
func (j *Journal) Get(seq uint64) (event.Record, error) {
	var rec event.Record
	err := j.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRecords).Get(seqKey(seq))
		if v == nil {
			return fmt.Errorf("journal: record %d: not found", seq)
		}
		var err error
		rec, err = DecodeRecord(seqKey(seq), v)
		return err
	})
	return rec, err
}

// TaskRecords calls fn for every record whose subject is task, in order. It reads every
// record's envelope (a forensics question, asked rarely: the file keeps no per-task index, see
// layout.go) and decodes only the task's own records.
func (j *Journal) TaskRecords(task string, fn func(event.Record) error) error {
	return j.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if !recordOfTask(v, task) {
				continue
			}
			rec, err := DecodeRecord(k, v)
			if err != nil {
				return err
			}
			if rec.Task != task {
				continue
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// Follow calls fn for every record from `from` on, then waits for new ones as they are
// committed, until ctx ends or fn fails. It holds no read transaction while it waits.
func (j *Journal) Follow(ctx context.Context, from uint64, fn func(event.Record) error) error {
	next := from
	for {
		ch := j.Changed()
		err := j.Iterate(next, func(r event.Record) error {
			next = r.Seq + 1
			return fn(r)
		})
		if err != nil {
			return err
		}
		if j.ro {
			// bbolt's lock admits no writer beside a read-only open: nothing new can come.
			return nil
		}
		select {
		case <-ch:
			if j.isClosed() {
				return ErrClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (j *Journal) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

// SeqAt returns the sequence number of the last record at or before t (0: none), by binary
// search over the records: record times follow sequence order.
func (j *Journal) SeqAt(t time.Time) (uint64, error) {
	var out uint64
	err := j.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		first, _ := c.First()
		last, _ := c.Last()
		if first == nil {
			return nil
		}
		lo, err := keySeq(first)
		if err != nil {
			return err
		}
		hi, err := keySeq(last)
		if err != nil {
			return err
		}
		timeOf := func(seq uint64) (uint64, time.Time, error) {
			k, v := c.Seek(seqKey(seq))
			if k == nil {
				return 0, time.Time{}, nil
			}
			at, err := keySeq(k)
			if err != nil {
				return 0, time.Time{}, err
			}
			raw, err := decodeRaw(v)
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("journal: record %d: %w", at, err)
			}
			return raw.seq, raw.time, nil
		}
		for lo <= hi {
			mid := lo + (hi-lo)/2
			seq, at, err := timeOf(mid)
			if err != nil {
				return err
			}
			if seq == 0 || at.After(t) {
				if mid == 0 {
					break
				}
				hi = mid - 1
			} else {
				out = seq
				lo = seq + 1
			}
		}
		return nil
	})
	return out, err
}

// Range returns the first and last sequence numbers stored (0, 0 for an empty journal).
func (j *Journal) Range() (first, last uint64, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		var err error
		if k, _ := c.First(); k != nil {
			if first, err = keySeq(k); err != nil {
				return err
			}
		}
		if k, _ := c.Last(); k != nil {
			last, err = keySeq(k)
		}
		return err
	})
	return first, last, err
}

// CopyTo writes a consistent copy of the whole file from one read transaction: what
// `agentd journal export` and GET /v1/journal/export serve while the agent keeps appending.
func (j *Journal) CopyTo(w io.Writer) (int64, error) {
	var n int64
	err := j.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// SnapshotSeqs lists the sequence numbers snapshots are stored at.
func (j *Journal) SnapshotSeqs() ([]uint64, error) {
	var out []uint64
	err := j.db.View(func(tx *bolt.Tx) error {
		out = snapshotSeqs(tx)
		return nil
	})
	return out, err
}

// SnapshotBytes is what the stored snapshots hold, as stored (compressed): the part of the
// journal's bytes in use that no compaction frees, since every snapshot kept holds the whole
// projection — the live tasks and every tombstone within the retention.
func (j *Journal) SnapshotBytes() (int64, error) {
	var n int64
	err := j.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSnapshots).ForEach(func(_, v []byte) error {
			n += int64(len(v))
			return nil
		})
	})
	return n, err
}
