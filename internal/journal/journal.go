// Package journal is agentd's append-only event log: one bbolt file that is the agent's only
// source of truth.
//
// It promises:
//   - Append returns only once its records are durable (fsync'd by the bbolt commit), and the
//     records of one Append are atomic: after a crash all of them are there or none.
//   - Sequence numbers are strictly increasing with no gaps, except where compaction cut, and
//     every cut is recorded so continuity can still be checked.
//   - Every record carries a CRC32C over its encoded bytes; bad bytes are reported with the
//     sequence number at fault, never misread, never a panic.
//   - A journal written by a newer schema is refused, not misread.
package journal

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/agentd/agentd/internal/datadir"
)

// SchemaVersion is the layout of buckets and keys this build writes and understands.
// Version 1 also kept an on-disk per-task index; version 2 dropped it (see layout.go).
const SchemaVersion = 2

// FileName is the journal's name inside a data directory.
const FileName = "journal.db"

var (
	bucketMeta      = []byte("meta")
	bucketRecords   = []byte("records")
	bucketSnapshots = []byte("snapshots")
	bucketHoles     = []byte("holes")

	keySchema    = []byte("schema")
	keyJournalID = []byte("journal_id")
)

// ErrClosed is returned by operations on a closed journal.
var ErrClosed = errors.New("journal: closed")

// ErrLocked is wrapped by Open when another process holds the file.
var ErrLocked = errors.New("journal locked by another agentd process")

// Options tune Open. The zero value is what the daemon uses.
type Options struct {
	// ReadOnly opens with a shared lock for forensics; a running daemon's exclusive lock makes
	// it fail after Timeout with ErrLocked.
	ReadOnly bool
	// Timeout bounds the wait for the file lock (default 1 s). Never infinite: a hung open
	// is worse than a clear error.
	Timeout time.Duration
	// MaxBatch bounds the records one group commit carries (default 8192).
	MaxBatch int
	// BeforeCommit, when set, is called before every commit; an error fails that commit as a
	// full disk or a read-only file would, and nothing of it is written. For fault tests.
	BeforeCommit func() error
	// ReleaseEvery bounds how much of the file stays resident through the mapping while the
	// agent writes (default 8 MiB): each page a commit writes is read back through the
	// mapping by later commits (bbolt walks to the newest leaf), so without a bound the
	// agent's RSS grows by every page it writes until the next compaction — 30 MB in a burst
	// of 20,000 tasks (issue 25). Once the commits since the last release have written this
	// many bytes of pages, the writer releases the mapping's pages again (releaseMapped).
	ReleaseEvery int64
}

// Journal is an open journal file.
type Journal struct {
	path string
	db   *bolt.DB
	id   string
	ro   bool

	q            *queue
	stop         chan struct{}
	done         chan struct{}
	maxBatch     int
	beforeCommit func() error
	releaseEvery int64 // bytes of pages written between releases of the mapping (Options.ReleaseEvery)
	releasedAt   int64 // bbolt's count of page bytes written at the last release

	sendMu   sync.RWMutex // held shared while enqueueing, exclusively to close: no request is stranded
	mu       sync.Mutex
	closed   bool
	last     uint64        // last committed sequence number
	changed  chan struct{} // closed and replaced after every commit
	reached  []seqWaiter   // closed once last reaches their seq (NotifyAt)
	idle     chan struct{} // closed while the writer is idle (Idle)
	isIdle   bool          // nothing queued for idleAfter
	holes    []hole        // compaction cuts, ascending
	commitNs stats
}

// Open opens or creates the journal at path. In a data directory use filepath.Join(dir, FileName).
func Open(path string, opts Options) (*Journal, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 8192
	}
	if opts.ReleaseEvery <= 0 {
		opts.ReleaseEvery = 8 << 20
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("journal: open %s: %w", path, err)
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	if !opts.ReadOnly {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			if err := create(path); err != nil {
				return nil, fmt.Errorf("journal: create %s: %w", path, err)
			}
		}
	}
	// bbolt maps the file and, with NoFreelistSync, walks its whole tree in a goroutine of its
	// own: a damaged page there panics where no recover reaches, and a truncated file dies of
	// SIGBUS. So the file is read and checked first, and damage is named instead.
	if err := checkFile(path, opts.Timeout); err != nil {
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	db, err := openBolt(path, &bolt.Options{
		Timeout:  opts.Timeout,
		ReadOnly: opts.ReadOnly,
		// The freelist is rebuilt by scanning at open instead of being rewritten on every
		// commit: one page write less per group commit, and no stale-freelist panics at open.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Long read transactions (export, replay, follow) must not block the writer when the
		// file grows: map generously up front (address space, not memory).
		InitialMmapSize: 1 << 30,
		OpenFile:        openNoFollow, // never through a planted symlink
		// NoSync is never set: a crash could corrupt the file, not just lose the tail.
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("journal: open %s: %w%s", path, ErrLocked, lockHolder(path))
		}
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	j := &Journal{path: path, db: db, ro: opts.ReadOnly, maxBatch: opts.MaxBatch, changed: make(chan struct{}), beforeCommit: opts.BeforeCommit,
		releaseEvery: opts.ReleaseEvery, idle: make(chan struct{}), isIdle: true}
	close(j.idle) // nothing is queued yet
	if err := j.init(); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal: open %s: %w", path, err)
	}
	if !j.ro {
		if err := writePidFile(path + ".pid"); err != nil {
			db.Close()
			return nil, fmt.Errorf("journal: open %s: %w", path, err)
		}
		j.q = newQueue()
		j.stop = make(chan struct{})
		j.done = make(chan struct{})
		go j.writer()
	}
	j.releaseMapped() // the open walked every page: they need not count as the agent's memory
	return j, nil
}

// create makes a new journal at path whole or not at all: written and synced under a
// temporary name, renamed into place, and the directory synced. Created in place, a power cut
// during bbolt's first writes left an empty or torn journal.db that every later start refused
// as damaged, and its name was durable only by luck of a later directory sync (issue 44).
func create(path string) error {
	tmp := path + ".new" // never a journal until renamed: a leftover is from a cut creation
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bolt.FreelistMapType, OpenFile: openNoFollow})
	if err != nil {
		return err
	}
	if err := (&Journal{db: db}).init(); err != nil {
		db.Close()
		return err
	}
	if err := db.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return datadir.SyncDir(filepath.Dir(path))
}

func lockHolder(path string) string {
	b, err := os.ReadFile(path + ".pid")
	if err != nil {
		return " (pid unknown)"
	}
	return fmt.Sprintf(" (pid %s)", strings.TrimSpace(string(b)))
}

// init creates the buckets of a new journal, or checks the schema of an existing one, and
// loads the last sequence number and the compaction cuts.
func (j *Journal) init() error {
	check := func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return errors.New("not an agentd journal: no meta bucket")
		}
		v := meta.Get(keySchema)
		if len(v) != 4 {
			return errors.New("not an agentd journal: no schema version")
		}
		if s := binary.BigEndian.Uint32(v); s > SchemaVersion {
			return fmt.Errorf("written by schema %d, this agentd understands up to %d: upgrade agentd, do not edit the file", s, SchemaVersion)
		}
		j.id = string(meta.Get(keyJournalID))
		for _, b := range layoutBuckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("damaged journal: bucket %q missing", b)
			}
		}
		var err error
		if k, _ := tx.Bucket(bucketRecords).Cursor().Last(); k != nil {
			if j.last, err = keySeq(k); err != nil {
				return fmt.Errorf("damaged journal: %w", err)
			}
		}
		j.holes, err = loadHoles(tx)
		if hl := len(j.holes); hl > 0 && j.holes[hl-1].to > j.last {
			j.last = j.holes[hl-1].to
		}
		return err
	}
	if j.ro {
		return j.db.View(check)
	}
	return j.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketMeta) == nil && tx.Bucket(bucketRecords) == nil {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			if err := meta.Put(keySchema, binary.BigEndian.AppendUint32(nil, SchemaVersion)); err != nil {
				return err
			}
			id := make([]byte, 8)
			_, _ = rand.Read(id)
			if err := meta.Put(keyJournalID, []byte(hex.EncodeToString(id))); err != nil {
				return err
			}
			for _, b := range layoutBuckets {
				if _, err := tx.CreateBucket(b); err != nil {
					return err
				}
			}
		}
		if err := upgradeLayout(tx); err != nil {
			return err
		}
		return check(tx)
	})
}

// Path is the file the journal lives in.
func (j *Journal) Path() string { return j.path }

// ID is a random identifier fixed when the journal was created. Change ids include it, so a
// journal that is wiped and started anew never reuses an id the control plane has seen.
func (j *Journal) ID() string { return j.id }

// LastSeq is the sequence number of the last durable record (0 for an empty journal).
func (j *Journal) LastSeq() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

// Changed returns a channel that is closed at the next commit. Waiting on it costs no
// goroutine and no polling.
func (j *Journal) Changed() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changed
}

// seqWaiter is one NotifyAt.
type seqWaiter struct {
	seq uint64
	ch  chan struct{}
}

// NotifyAt returns a channel closed once record seq is durable (or the journal closes), and a
// function that withdraws it. Unlike Changed, which wakes its reader at every commit, it wakes
// one that waits for many records (a batch) once: the writer only compares numbers at a commit.
func (j *Journal) NotifyAt(seq uint64) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.last >= seq || j.closed {
		close(ch)
		return ch, func() {}
	}
	j.reached = append(j.reached, seqWaiter{seq, ch})
	return ch, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.reached = slices.DeleteFunc(j.reached, func(w seqWaiter) bool { return w.ch == ch })
	}
}

// notifyReached closes the NotifyAt channels whose record is durable (all of them once the
// journal closes). j.mu is held.
func (j *Journal) notifyReached() {
	if len(j.reached) == 0 {
		return
	}
	j.reached = slices.DeleteFunc(j.reached, func(w seqWaiter) bool {
		if w.seq <= j.last || j.closed {
			close(w.ch)
			return true
		}
		return false
	})
}

// WaitFor blocks until a record after seq is durable, the context ends, or the journal closes.
func (j *Journal) WaitFor(ctx context.Context, seq uint64) error {
	for {
		j.mu.Lock()
		last, ch, closed := j.last, j.changed, j.closed
		j.mu.Unlock()
		if last > seq {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Size is the journal file's size in bytes.
func (j *Journal) Size() (int64, error) {
	var n int64
	err := j.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n, err
}

// InUse is the bytes the journal's pages hold: its size less the pages freed for reuse
// (bbolt's file never shrinks; a compaction's freed pages are taken by later commits first).
// This is what --journal-max-bytes bounds.
func (j *Journal) InUse() (int64, error) {
	var n int64
	err := j.db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	st := j.db.Stats()
	n -= int64(st.FreePageN+st.PendingPageN) * int64(j.db.Info().PageSize)
	return n, err
}

// DB exposes the bbolt handle for tools that measure or inspect the file itself (bench,
// export). Writes through it bypass every guarantee of this package.
func (j *Journal) DB() *bolt.DB { return j.db }

// ReleaseMapped drops the mapped file's pages from the process's resident set (releaseMapped),
// for a caller that has just read much of the journal: recovery's replay of the records after
// the snapshot reads them through the mapping, and they would stay counted as the agent's
// memory, clean though they are.
func (j *Journal) ReleaseMapped() { j.releaseMapped() }

// Close stops the writer after the queued appends are committed, and closes the file.
func (j *Journal) Close() error {
	j.sendMu.Lock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		j.sendMu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	j.sendMu.Unlock()
	if !j.ro {
		close(j.stop)
		<-j.done
		_ = os.Remove(j.path + ".pid")
	}
	j.mu.Lock()
	close(j.changed)
	j.notifyReached()
	j.mu.Unlock()
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("journal: close %s: %w", j.path, err)
	}
	return nil
}

// Meta reads a small named value kept beside the records (e.g. the agent id), "" if unset.
func (j *Journal) Meta(key string) (string, error) {
	var v string
	err := j.db.View(func(tx *bolt.Tx) error {
		v = string(tx.Bucket(bucketMeta).Get([]byte("x:" + key)))
		return nil
	})
	return v, err
}

// SetMeta stores a small named value durably, in a commit of its own.
func (j *Journal) SetMeta(ctx context.Context, key, value string) error {
	return j.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put([]byte("x:"+key), []byte(value))
	})
}
