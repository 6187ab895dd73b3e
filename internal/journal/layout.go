package journal

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The file holds four buckets:
//
//	meta:      schema version, journal id, small named values
//	records:   sequence number (8 bytes, big-endian) → encoded record
//	snapshots: sequence number + chunk number → snapshot bytes (see snapshot.go)
//	holes:     first → last sequence number of each range compaction removed
//
// Schema 1 also kept a per-task index on disk (task ARN → index id, and index id + sequence
// number → nothing). It was dropped in schema 2: every record a commit carried wrote an index
// entry too, so a group commit dirtied about twice the pages it needed and could carry less
// than half the records per second of the records alone (measured with bbolt by itself, 64
// records a commit: 85,569 records/s with the index, 193,408 without). Its only readers were
// the forensics tools and the simulation's failure traces, which can afford a scan of the
// record headers; the daemon never read it.
//
// layoutBuckets are the buckets beside meta.
var layoutBuckets = [][]byte{bucketRecords, bucketSnapshots, bucketHoles}

// schema1Index are the buckets of the per-task index schema 1 kept.
var schema1Index = [][]byte{[]byte("tasks"), []byte("by-task")}

// upgradeLayout brings a schema-1 file opened for writing to schema 2 in the open's own
// commit: the index goes (its pages return to the free list), the records stay untouched. A
// read-only open reads a schema-1 file as it is: the index buckets are simply not read.
func upgradeLayout(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return nil // not a journal: check says so
	}
	v := meta.Get(keySchema)
	if len(v) != 4 || binary.BigEndian.Uint32(v) >= SchemaVersion {
		return nil
	}
	for _, b := range schema1Index {
		if tx.Bucket(b) == nil {
			continue
		}
		if err := tx.DeleteBucket(b); err != nil {
			return fmt.Errorf("upgrade to schema %d: drop bucket %q: %w", SchemaVersion, b, err)
		}
	}
	return meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, SchemaVersion))
}
