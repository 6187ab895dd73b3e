package journal

import (
	"fmt"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
)

// CopyToFile writes a consistent copy of the journal into a new unlinked file in dir and
// returns it open at its start, with its size. The read transaction lasts only as long as the
// local copy takes, so a client that reads the copy slowly never holds one open: bbolt's
// writer must wait for open read transactions when the file outgrows its memory map, and an
// export served straight from a transaction would let a slow client stall every append.
func (j *Journal) CopyToFile(dir string) (*os.File, int64, error) {
	f, err := os.CreateTemp(dir, ".export-*.tmp") // O_EXCL, mode 0600
	if err != nil {
		return nil, 0, fmt.Errorf("journal: export copy in %s: %w", dir, err)
	}
	// Unlinked at once: the copy goes away with the last reader, also after a crash.
	_ = os.Remove(f.Name())
	var n int64
	err = j.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(f)
		return err
	})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("journal: export copy: %w", err)
	}
	return f, n, nil
}
