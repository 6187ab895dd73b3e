// Package journaltest plants defects in a journal file for the tests of what reads journals
// (journal.Verify, forensics, agentd journal verify): it writes the records bucket of a closed
// file directly, through bbolt, past every check an agent makes — no Journal method can write
// a record the agent would not, so no production binary carries a way to (`go list -deps
// ./cmd/agentd` does not name this package). It knows the file's layout as journal's layout.go
// documents it: records keyed by their sequence number, 8 bytes big-endian.
package journaltest

import (
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var records = []byte("records")

// PutRecord stores value as record seq of the journal file at path, with no checks at all:
// a flipped byte, a truncated record, a record under the wrong number. The file must not be
// open (a Journal holds its lock; the open gives up after a second and says so).
func PutRecord(path string, seq uint64, value []byte) error {
	return PutKey(path, key(seq), value)
}

// PutKey stores value under k in the records bucket, a key of any length: damage no sequence
// number can make.
func PutKey(path string, k, value []byte) error {
	return update(path, func(b *bolt.Bucket) error { return b.Put(k, value) })
}

// DeleteRecord removes record seq of the journal file at path without recording a
// compaction's cut, leaving a gap.
func DeleteRecord(path string, seq uint64) error {
	return update(path, func(b *bolt.Bucket) error { return b.Delete(key(seq)) })
}

func key(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func update(path string, op func(*bolt.Bucket) error) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("journaltest: open %s (is a Journal still holding it?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(records)
		if b == nil {
			return fmt.Errorf("no %q bucket: not a journal", records)
		}
		return op(b)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journaltest: %s: %w", path, err)
	}
	return nil
}
