package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/datadir"

	"github.com/agentd/agentd/internal/event"
)

// rewriteBatch bounds the records one rewrite commit carries.
const rewriteBatch = 1000

// errBatchFull ends one read pass of Rewrite.
var errBatchFull = errors.New("batch full")

// Rewrite replaces, in place and keeping sequence numbers, times and subjects, every record for
// which rec returns changed, and every snapshot for which snap returns changed. It is for
// one-time migrations of the body format (e.g. sealing values written in the clear) run before
// the agent starts appending; each commit carries at most rewriteBatch records. Bytes replaced
// stay in the file's free pages until Scrub rewrites the file.
func (j *Journal) Rewrite(ctx context.Context, rec func(event.Record) (event.Record, bool, error), snap func(seq uint64, data []byte) ([]byte, bool, error)) (records, snapshots int, err error) {
	from := uint64(1)
	for {
		type put struct {
			seq   uint64
			value []byte
		}
		var puts []put
		next := uint64(0)
		err := j.db.View(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketRecords).Cursor()
			for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
				r, err := DecodeRecord(k, v)
				if err != nil {
					return err
				}
				nr, changed, err := rec(r)
				if err != nil {
					return fmt.Errorf("record %d: %w", r.Seq, err)
				}
				if changed {
					nr.Seq, nr.Time, nr.Task, nr.Container = r.Seq, r.Time, r.Task, r.Container
					b, err := EncodeRecord(nr)
					if err != nil {
						return fmt.Errorf("record %d: %w", r.Seq, err)
					}
					puts = append(puts, put{r.Seq, b})
				}
				next = r.Seq + 1
				if len(puts) >= rewriteBatch {
					return errBatchFull
				}
			}
			next = 0
			return nil
		})
		if err != nil && !errors.Is(err, errBatchFull) {
			return records, snapshots, fmt.Errorf("journal: rewrite: %w", err)
		}
		if len(puts) > 0 {
			if err := j.update(ctx, func(tx *bolt.Tx) error {
				b := tx.Bucket(bucketRecords)
				for _, p := range puts {
					if err := b.Put(seqKey(p.seq), p.value); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return records, snapshots, fmt.Errorf("journal: rewrite: %w", err)
			}
			records += len(puts)
		}
		if next == 0 {
			break
		}
		from = next
	}
	if snap == nil {
		return records, snapshots, nil
	}
	err = j.update(ctx, func(tx *bolt.Tx) error {
		for _, at := range snapshotSeqs(tx) {
			data, err := readSnapshot(tx, at)
			if err != nil {
				continue // a damaged snapshot is skipped at recovery anyway; keep it as found
			}
			nd, changed, err := snap(at, data)
			if err != nil {
				return fmt.Errorf("snapshot at %d: %w", at, err)
			}
			if !changed {
				continue
			}
			if err := deleteSnapshot(tx, at); err != nil {
				return err
			}
			if err := putSnapshot(tx, at, packSnapshot(nd)); err != nil {
				return err
			}
			snapshots++
		}
		return nil
	})
	if err != nil {
		return records, 0, fmt.Errorf("journal: rewrite snapshots: %w", err)
	}
	return records, snapshots, nil
}

// Scrub rewrites the closed journal file at path into a fresh file and renames it over the
// old one, so that bytes of replaced or deleted values left in free pages are gone from the
// file (bbolt reuses free pages but never clears them). Nothing else may have the file open.
func Scrub(path string) error {
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true, OpenFile: openNoFollow})
	if err != nil {
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	defer src.Close()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".scrub")
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, OpenFile: openNoFollow, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	if err := bolt.Compact(dst, src, 64<<20); err != nil {
		dst.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	if err := dst.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	if err := datadir.SyncDir(filepath.Dir(path)); err != nil { // or the rename may be undone by a power cut
		return fmt.Errorf("journal: scrub %s: %w", path, err)
	}
	return nil
}
