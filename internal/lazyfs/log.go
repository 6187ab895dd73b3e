package lazyfs

// The operation log: every change the mount saw, in the order it made it, each numbered by
// the barrier (fsync) it follows. Invariant: replaying the log onto the tree the mount started
// from gives the tree the mount shows; the Tracker's durable tree is the log with every change
// not yet covered by its fsync left out.

import (
	"fmt"
	"path"
)

// Kind is what an Op does.
type Kind uint8

const (
	OpWrite    Kind = iota + 1 // Data at Off of inode Ino
	OpTruncate                 // inode Ino to Size
	OpCreate                   // name Path for inode Ino (a new, empty file)
	OpMkdir                    // directory Path
	OpUnlink                   // name Path
	OpRmdir                    // directory Path
	OpRename                   // name Path to To, replacing To
	OpFsync                    // inode Ino's data (fsync and fdatasync alike)
	OpFsyncDir                 // directory Path's entries
)

var kindNames = [...]string{OpWrite: "write", OpTruncate: "truncate", OpCreate: "create", OpMkdir: "mkdir",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpFsync: "fsync", OpFsyncDir: "fsyncdir"}

func (k Kind) String() string { return kindNames[k] }

// Op is one logged operation.
type Op struct {
	Index   int    // position in the log
	Barrier int    // how many barriers (fsyncs) came before it
	Kind    Kind   //
	Ino     uint64 // the file, for data ops, creates and fsyncs
	Path    string // the file's name when the op was made (for data ops: for reading the log)
	To      string // rename's new name
	Off     int64
	Data    []byte
	Size    int64
}

// IsBarrier says whether op is an fsync of a file or a directory.
func (op *Op) IsBarrier() bool { return op.Kind == OpFsync || op.Kind == OpFsyncDir }

// isEntry says whether op changes a directory's entries (made durable by its fsync).
func (op *Op) isEntry() bool {
	switch op.Kind {
	case OpCreate, OpMkdir, OpUnlink, OpRmdir, OpRename:
		return true
	}
	return false
}

// dirs are the directories whose fsync makes an entry op durable.
func (op *Op) dirs() []string {
	d := parent(op.Path)
	if op.Kind == OpRename && parent(op.To) != d {
		return []string{d, parent(op.To)}
	}
	return []string{d}
}

func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

func (op *Op) String() string {
	s := fmt.Sprintf("#%d (after barrier %d) %s", op.Index, op.Barrier, op.Kind)
	switch op.Kind {
	case OpWrite:
		return fmt.Sprintf("%s %s [%d, %d)", s, op.Path, op.Off, op.Off+int64(len(op.Data)))
	case OpTruncate:
		return fmt.Sprintf("%s %s to %d", s, op.Path, op.Size)
	case OpRename:
		return fmt.Sprintf("%s %s -> %s", s, op.Path, op.To)
	}
	return s + " " + op.Path
}

// Tracker keeps the log and the durable tree: what a power cut would leave.
type Tracker struct {
	keepLog     bool
	log         []*Op
	barriers    int
	durable     *Image
	pendingData map[uint64][]*Op // per inode, since its last fsync
	pendingDir  map[string][]*Op // per directory, since its last fsync
	applied     map[*Op]bool     // entry ops already durable (a rename between directories waits on both)
}

// NewTracker starts from base, the tree on disk; keepLog keeps every op (crash states are built
// from it), otherwise only what is pending.
func NewTracker(base *Image, keepLog bool) *Tracker {
	return &Tracker{keepLog: keepLog, durable: base, pendingData: map[uint64][]*Op{}, pendingDir: map[string][]*Op{},
		applied: map[*Op]bool{}}
}

// Record logs op and, for a barrier, makes what it covers durable.
func (t *Tracker) Record(op *Op) {
	op.Index, op.Barrier = len(t.log), t.barriers
	if t.keepLog {
		t.log = append(t.log, op)
	}
	t.apply(op)
}

// apply makes op pending, or, for a barrier, makes what it covers durable.
func (t *Tracker) apply(op *Op) {
	switch {
	case op.Kind == OpFsync:
		t.barriers++
		for _, p := range t.pendingData[op.Ino] {
			t.durable.Apply(p)
		}
		delete(t.pendingData, op.Ino)
	case op.Kind == OpFsyncDir:
		t.barriers++
		for _, p := range t.pendingDir[op.Path] {
			if !t.applied[p] {
				t.durable.Apply(p)
				t.applied[p] = true
			}
		}
		delete(t.pendingDir, op.Path)
	case op.isEntry():
		for _, d := range op.dirs() {
			t.pendingDir[d] = append(t.pendingDir[d], op)
		}
	default:
		t.pendingData[op.Ino] = append(t.pendingData[op.Ino], op)
	}
}

// Durable is the tree a power cut leaves now.
func (t *Tracker) Durable() *Image { return t.durable }

// Log is every op recorded (when kept).
func (t *Tracker) Log() []*Op { return t.log }

// Pending counts the ops a power cut would lose now.
func (t *Tracker) Pending() int {
	n := 0
	for _, ops := range t.pendingData {
		n += len(ops)
	}
	for _, ops := range t.pendingDir {
		for _, op := range ops {
			if !t.applied[op] {
				n++
			}
		}
	}
	return n
}
