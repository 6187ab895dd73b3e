package journal

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/event"
)

// Problem is one defect Verify found, named by sequence number (0 when it concerns the file
// rather than a record).
type Problem struct {
	Seq  uint64
	Task string
	What string
}

func (p Problem) String() string {
	s := fmt.Sprintf("record %d", p.Seq)
	if p.Seq == 0 {
		s = "file"
	}
	if p.Task != "" {
		s += fmt.Sprintf(" (task %s)", p.Task)
	}
	return s + ": " + p.What
}

// VerifyResult summarises a Verify walk.
type VerifyResult struct {
	Records   int
	FirstSeq  uint64
	LastSeq   uint64
	Snapshots int
	Holes     int
	Problems  []Problem
}

// Verify walks the whole file and returns every problem found, not just the first: bbolt's own
// page consistency, each record's checksum, encoding and body, sequence continuity (compaction
// cuts allowed), and the snapshots' checksums. visit, if not nil, sees every
// sound record in order (the invariant checks of the projection hang off it).
func (j *Journal) Verify(visit func(event.Record)) (VerifyResult, error) {
	var res VerifyResult
	err := j.db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			res.Problems = append(res.Problems, Problem{What: "bbolt: " + err.Error()})
		}
		holes, err := loadHoles(tx)
		if err != nil {
			res.Problems = append(res.Problems, Problem{What: err.Error()})
		}
		res.Holes = len(holes)
		recs := tx.Bucket(bucketRecords)
		var prev uint64
		_ = recs.ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				res.Problems = append(res.Problems, Problem{What: fmt.Sprintf("record key %x is not a sequence number", k)})
				return nil
			}
			seq := binary.BigEndian.Uint64(k)
			res.Records++
			if res.FirstSeq == 0 {
				res.FirstSeq = seq
				if seq != 1 && !holesCover(holes, 1, seq-1) {
					res.Problems = append(res.Problems, Problem{Seq: seq, What: fmt.Sprintf("journal starts at %d: records 1..%d missing, not compacted", seq, seq-1)})
				}
			}
			if prev != 0 && seq != prev+1 && !holesCover(holes, prev+1, seq-1) {
				res.Problems = append(res.Problems, Problem{Seq: seq, What: fmt.Sprintf("sequence gap: records %d..%d missing, not compacted", prev+1, seq-1)})
			}
			prev = seq
			res.LastSeq = seq
			rec, err := DecodeRecord(k, v)
			if err != nil {
				p := Problem{Seq: seq, What: err.Error()}
				if raw, rerr := decodeRaw(v); rerr == nil {
					p.Task = raw.task
				}
				res.Problems = append(res.Problems, p)
				return nil
			}
			if visit != nil {
				visit(rec)
			}
			return nil
		})
		for _, at := range snapshotSeqs(tx) {
			res.Snapshots++
			if _, err := readSnapshot(tx, at); err != nil {
				res.Problems = append(res.Problems, Problem{Seq: at, What: "snapshot at this record: " + err.Error()})
			}
		}
		return nil
	})
	return res, err
}

// EncodeRecord encodes rec (with its Seq) exactly as Append stores it: rewrites write it, and
// with journaltest it lets tests build journals holding chosen defects.
func EncodeRecord(rec event.Record) ([]byte, error) {
	body, err := event.MarshalBody(rec.Event)
	if err != nil {
		return nil, err
	}
	return encodeRecord(nil, rec.Seq, rec.Time.UTC(), rec.Event.Type(), rec.Task, rec.Container, body), nil
}
