package journal

import (
	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// releaseMapped drops the pages of the mapped file from the process's resident set. bbolt
// touches every page at open (it rebuilds the free list by walking the tree) and compaction
// reads the history it removes: without this, the agent's RSS counts the whole journal — 100 MB
// and more on a busy host — though the pages are clean and the kernel reads them back from its
// page cache when next read (issue 25). It runs inside a read transaction, which holds bbolt's
// mmap lock: the mapping cannot move or go while it is advised.
func (j *Journal) releaseMapped() {
	_ = j.db.View(func(tx *bolt.Tx) error {
		start, size := j.db.Info().Data, tx.Size()
		if start == 0 || size <= 0 {
			return nil
		}
		_, _, errno := unix.Syscall(unix.SYS_MADVISE, start, uintptr(size), unix.MADV_DONTNEED)
		if errno != 0 {
			return errno
		}
		return nil
	})
}
