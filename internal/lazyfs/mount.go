// Package lazyfs is a file system for power-loss tests: a FUSE loopback mount over a backing
// directory that behaves as a disk with a volatile cache in front of it.
//
// It promises: everything written, truncated, created, renamed or unlinked through the mount
// is visible through it at once (the backing directory plays the page cache), but reaches the
// "disk" — the Tracker's durable tree — only when fsync or fdatasync of that file, or for
// directory entries the fsync of that directory, returns. PowerCut drops everything else: it
// unmounts, rewrites the backing directory to the durable tree, and mounts again. Every
// operation is logged with the barrier it follows, so crash states can be built from the log
// (states.go) without a mount per state.
//
// Not modelled (refused with ENOTSUP, so a program depending on them fails loudly): hard and
// symbolic links, O_TMPFILE, fallocate and copy_file_range. Writes through a shared mmap never
// reach a FUSE loopback either; bbolt maps its file read-only and writes with pwrite.
//
// The process serving the mount must not map a file on it: a page fault there waits for the
// server, which the Go runtime may have stopped for a collection that waits for the fault.
// Run what uses the mount (bbolt above all) in another process.
package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dropUnsynced is what makes the file system lazy; only the test of the tests turns it off
// (forgets.go, -tags lazyfsforgets), to show the suite fails on a file system that keeps
// unsynced writes across a power cut.
var dropUnsynced = true

// FS is a mounted lazy file system.
type FS struct {
	backing, mountpoint string

	mu      sync.Mutex // orders the backing directory's changes and the log the same way
	tracker *Tracker
	keepLog bool
	server  *fuse.Server
	cuts    int
}

// Options tune Mount.
type Options struct {
	// KeepLog keeps every operation with its data (for building crash states from a run);
	// otherwise only what is pending is held.
	KeepLog bool
}

// Available says why FUSE cannot be mounted here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("lazyfs: mounting with DirectMount needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: /dev/fuse: %w", err)
	}
	f.Close()
	return nil
}

// Mount serves backing (the disk's contents) at mountpoint; both directories must exist.
func Mount(backing, mountpoint string, o Options) (*FS, error) {
	base, err := Scan(backing)
	if err != nil {
		return nil, err
	}
	f := &FS{backing: backing, mountpoint: mountpoint, keepLog: o.KeepLog, tracker: NewTracker(base, o.KeepLog)}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FS) mount() error {
	root, err := fs.NewLoopbackRoot(f.backing)
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.backing, err)
	}
	ln := root.(*fs.LoopbackNode)
	n := &node{LoopbackNode: ln, fs: f}
	ln.RootData.RootNode = n
	sec := time.Second
	server, err := fs.Mount(f.mountpoint, n, &fs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{DirectMount: true, FsName: "lazyfs", Name: "lazyfs"},
	})
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s at %s: %w", f.backing, f.mountpoint, err)
	}
	f.server = server
	return nil
}

// Tracker is the log and durable tree (read them only while nothing writes).
func (f *FS) Tracker() *Tracker { return f.tracker }

// LogLen is how many operations have been logged: an event that happens after LogLen returned
// n happened after operation n-1.
func (f *FS) LogLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tracker.log)
}

// PowerCut loses everything not yet synced: it unmounts (the kernel's page cache goes with
// the mount), rewrites the backing directory to the durable tree and mounts again. Processes
// using the mount must be dead (killed: that is the power cut for them); a mount still busy
// after 10 s is an error. The log starts again from the tree left.
func (f *FS) PowerCut() (lost int, err error) {
	if err := f.unmount(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	lost = f.tracker.Pending()
	if dropUnsynced {
		entries, err := os.ReadDir(f.backing)
		if err != nil {
			return 0, fmt.Errorf("lazyfs: power cut: %w", err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(f.backing, e.Name())); err != nil {
				return 0, fmt.Errorf("lazyfs: power cut: %w", err)
			}
		}
		if err := f.tracker.Durable().Materialize(f.backing); err != nil {
			return 0, err
		}
	}
	base, err := Scan(f.backing)
	if err != nil {
		return 0, err
	}
	f.tracker = NewTracker(base, f.keepLog)
	f.cuts++
	return lost, f.mount()
}

func (f *FS) unmount() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f.server.Unmount()
		if err == nil {
			f.server.Wait()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lazyfs: unmount %s: %w", f.mountpoint, err)
		}
		time.Sleep(20 * time.Millisecond) // a killed process's files are closed by the kernel shortly
	}
}

// Close unmounts, keeping the backing directory as it is (unsynced writes included).
func (f *FS) Close() error { return f.unmount() }

// record logs op and runs do, the backing directory's change, under the one lock, so the log
// has the order the changes had. An op that fails is not logged.
func (f *FS) record(op *Op, do func() syscall.Errno) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errno := do(); errno != 0 {
		return errno
	}
	f.tracker.Record(op)
	return 0
}
