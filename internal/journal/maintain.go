package journal

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/agentd/agentd/internal/failpoint"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
)

// keepSnapshots is how many snapshots are kept: the newest, and one to fall back on should the
// newest prove unreadable.
const keepSnapshots = 2

// Snapshot is a stored projection snapshot covering records up to AtSeq.
type Snapshot struct {
	AtSeq uint64
	Data  []byte
}

// AppendPackedSnapshot is Append with a snapshot already in its stored form (PackSnapshot's):
// data, the projection's state after record atSeq, is stored in the same commit as recs (which
// carry its snapshot_taken record), so a burst's records and the snapshot it ends with are
// durable together or not at all, in the one commit path. atSeq is at most the number the last
// of recs gets.
func (j *Journal) AppendPackedSnapshot(ctx context.Context, atSeq uint64, data []byte, recs ...event.Record) ([]event.Record, error) {
	if last := j.LastSeq() + uint64(len(recs)); atSeq > last {
		return nil, fmt.Errorf("journal: snapshot at %d: beyond the last record %d", atSeq, last)
	}
	return j.appendWith(ctx, func(tx *bolt.Tx) error {
		if err := putSnapshot(tx, atSeq, data); err != nil {
			return err
		}
		failpoint.Hit("snapshot") // inside the snapshot's commit: all of it or none
		return nil
	}, recs)
}

// SaveSnapshot stores data as the projection's state after record atSeq, together with rec (a
// snapshot_taken record, appended in the same commit), and drops all but the newest snapshots.
func (j *Journal) SaveSnapshot(ctx context.Context, atSeq uint64, data []byte, rec event.Record) (event.Record, error) {
	if atSeq > j.LastSeq() {
		return event.Record{}, fmt.Errorf("journal: snapshot at %d: beyond last record %d", atSeq, j.LastSeq())
	}
	body, err := event.MarshalBody(rec.Event)
	if err != nil {
		return event.Record{}, fmt.Errorf("journal: snapshot at %d: %w", atSeq, err)
	}
	data = packSnapshot(data)
	// The snapshot goes in the same commit as its record: both or neither.
	req := &request{
		recs:   []event.Record{rec},
		bodies: [][]byte{body},
		done:   make(chan error, 1),
		op: func(tx *bolt.Tx) error {
			if err := putSnapshot(tx, atSeq, data); err != nil {
				return err
			}
			failpoint.Hit("snapshot") // inside the snapshot's commit: all of it or none
			return nil
		},
	}
	if err := j.submit(ctx, req); err != nil {
		return event.Record{}, err
	}
	if err := <-req.done; err != nil {
		return event.Record{}, err
	}
	return req.recs[0], nil
}

// SnapshotAtOrBefore returns the newest sound snapshot covering at most record seq (the newest
// of all: math.MaxUint64). Snapshots that fail their checksum are skipped and reported in
// skipped, so the caller can say it replayed further back.
func (j *Journal) SnapshotAtOrBefore(seq uint64) (snap *Snapshot, skipped []error, err error) {
	err = j.db.View(func(tx *bolt.Tx) error {
		seqs := snapshotSeqs(tx)
		for i := len(seqs) - 1; i >= 0; i-- {
			if seqs[i] > seq {
				continue
			}
			data, err := readSnapshot(tx, seqs[i])
			if err != nil {
				skipped = append(skipped, fmt.Errorf("journal: snapshot at %d: %w", seqs[i], err))
				continue
			}
			snap = &Snapshot{AtSeq: seqs[i], Data: data}
			return nil
		}
		return nil
	})
	return snap, skipped, err
}

// hole is a range of sequence numbers that compaction removed.
type hole struct{ from, to uint64 }

func loadHoles(tx *bolt.Tx) ([]hole, error) {
	var hs []hole
	err := tx.Bucket(bucketHoles).ForEach(func(k, v []byte) error {
		if len(k) != 8 || len(v) != 8 {
			return fmt.Errorf("journal: compaction cut %x: damaged", k)
		}
		hs = append(hs, hole{binary.BigEndian.Uint64(k), binary.BigEndian.Uint64(v)})
		return nil
	})
	return hs, err
}

// holesCover reports whether every sequence number in [from, to] was removed by compaction.
func holesCover(hs []hole, from, to uint64) bool {
	for _, h := range hs {
		if h.to < from {
			continue
		}
		if h.from > from {
			return false
		}
		if h.to >= to {
			return true
		}
		from = h.to + 1
	}
	return false
}

// CompactResult says what a compaction removed.
type CompactResult struct {
	Records int
	Holes   int
}

// compactChunk bounds the records one compaction commit examines, so appends wait at most
// one short commit behind it.
const compactChunk = 4096

// Header is a record's envelope without its body: what compaction decides by, read without
// decoding bodies.
type Header struct {
	Seq  uint64
	Time time.Time
	Type event.Type
	Task string
}

// Compact removes the records with sequence number ≤ upTo for which drop returns true, in
// commits of its own between appends, so appends wait at most one short commit. A snapshot
// must cover upTo, or a restart could not skip the cut. Every removed range is recorded, so
// continuity checks still hold.
func (j *Journal) Compact(ctx context.Context, upTo uint64, drop func(Header) bool) (CompactResult, error) {
	var res CompactResult
	snap, _, err := j.SnapshotAtOrBefore(^uint64(0))
	if err != nil {
		return res, err
	}
	if snap == nil || snap.AtSeq < upTo {
		return res, fmt.Errorf("journal: compact up to %d: no snapshot covers it", upTo)
	}
	next := uint64(1)
	for next <= upTo {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		start := next
		err := j.update(ctx, func(tx *bolt.Tx) error {
			recs := tx.Bucket(bucketRecords)
			c := recs.Cursor()
			examined := 0
			var removed []uint64
			k, v := c.Seek(seqKey(start))
			for ; k != nil && examined < compactChunk; examined++ {
				at, err := keySeq(k)
				if err != nil {
					return err
				}
				raw, err := decodeRaw(v)
				if err != nil {
					return fmt.Errorf("record %d: %w", at, err)
				}
				if raw.seq > upTo {
					break
				}
				if drop(Header{Seq: raw.seq, Time: raw.time, Type: raw.typ, Task: raw.task}) {
					removed = append(removed, raw.seq)
					if err := c.Delete(); err != nil {
						return err
					}
					k, v = c.Seek(seqKey(raw.seq + 1))
				} else {
					k, v = c.Next()
				}
			}
			next = upTo + 1
			if k != nil {
				at, err := keySeq(k)
				if err != nil {
					return err
				}
				next = min(at, next)
			}
			n, err := addHoles(tx, removed)
			res.Records += len(removed)
			res.Holes += n
			return err
		})
		if err != nil {
			return res, fmt.Errorf("journal: compact %s up to %d: %w", j.path, upTo, err)
		}
		failpoint.Hit("compaction") // between two of compaction's commits
	}
	j.releaseMapped() // the history it read and removed need not stay resident
	return res, j.reloadHoles()
}

// addHoles records removed sequence numbers as ranges, merging with adjacent recorded ranges.
func addHoles(tx *bolt.Tx, removed []uint64) (int, error) {
	b := tx.Bucket(bucketHoles)
	added := 0
	for i := 0; i < len(removed); {
		from, to := removed[i], removed[i]
		for i++; i < len(removed) && removed[i] == to+1; i++ {
			to = removed[i]
		}
		c := b.Cursor()
		// Merge with a recorded range ending just before.
		if k, v := c.Seek(seqKey(from)); true {
			if k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
			if k != nil && binary.BigEndian.Uint64(v)+1 == from {
				from = binary.BigEndian.Uint64(k)
				if err := b.Delete(k); err != nil {
					return added, err
				}
			}
		}
		// Merge with a recorded range starting just after.
		if v := b.Get(seqKey(to + 1)); v != nil {
			if err := b.Delete(seqKey(to + 1)); err != nil {
				return added, err
			}
			to = binary.BigEndian.Uint64(v)
		}
		if err := b.Put(seqKey(from), seqKey(to)); err != nil {
			return added, err
		}
		added++
	}
	return added, nil
}

func (j *Journal) reloadHoles() error {
	return j.db.View(func(tx *bolt.Tx) error {
		hs, err := loadHoles(tx)
		j.mu.Lock()
		j.holes = hs
		j.mu.Unlock()
		return err
	})
}

// Holes returns the recorded compaction cuts as [from, to] pairs.
func (j *Journal) Holes() [][2]uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([][2]uint64, len(j.holes))
	for i, h := range j.holes {
		out[i] = [2]uint64{h.from, h.to}
	}
	return out
}
