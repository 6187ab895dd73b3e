package journal

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// DamageSnapshot flips a byte of the first chunk of the snapshot at seq, as a bad disk would:
// fault injection for tests and the simulation, which must see recovery fall back to an older
// snapshot. The agent never calls it.
func (j *Journal) DamageSnapshot(at uint64) error {
	return j.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSnapshots)
		k := snapshotKey(at, 0)
		v := append([]byte(nil), b.Get(k)...)
		if len(v) == 0 {
			return fmt.Errorf("journal: no snapshot at %d", at)
		}
		v[len(v)-1] ^= 0x20
		return b.Put(k, v)
	})
}
