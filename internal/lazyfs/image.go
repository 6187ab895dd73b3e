package lazyfs

// An Image is one state of a file tree — what a disk holds, or what it would hold after a
// crash — kept in memory so that thousands of crash states cost no disk until one is checked.
// Invariant: a block, once stored, is never modified (writes replace it), so clones share
// blocks and the Image a crash state was built from is never changed by building another.

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// blockSize is the unit an Image stores file contents in; writes of any size and offset apply.
const blockSize = 4096

// hashSeed makes state hashes comparable within one process (all a run needs).
var hashSeed = maphash.MakeSeed()

type block struct {
	data [blockSize]byte
	hash uint64
}

// file is one inode's contents: a size and the blocks ever written (absent blocks read as zero).
type file struct {
	size   int64
	blocks map[int64]*block
	sum    uint64 // Σ over blocks of mix(index, block hash): the contents' hash, kept as blocks change
}

func (f *file) clone() *file {
	c := &file{size: f.size, blocks: make(map[int64]*block, len(f.blocks)), sum: f.sum}
	for i, b := range f.blocks {
		c.blocks[i] = b
	}
	return c
}

func mix(a, b uint64) uint64 {
	h := a*0x9E3779B97F4A7C15 ^ b
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>29
}

func (f *file) put(i int64, b *block) {
	if old := f.blocks[i]; old != nil {
		f.sum -= mix(uint64(i), old.hash)
	}
	if b == nil {
		delete(f.blocks, i)
		return
	}
	b.hash = maphash.Bytes(hashSeed, b.data[:])
	f.blocks[i] = b
	f.sum += mix(uint64(i), b.hash)
}

// write stores data at off, growing the file as pwrite does.
func (f *file) write(off int64, data []byte) {
	for len(data) > 0 {
		i, at := off/blockSize, off%blockSize
		nb := &block{}
		if old := f.blocks[i]; old != nil {
			nb.data = old.data
		}
		n := copy(nb.data[at:], data)
		f.put(i, nb)
		data, off = data[n:], off+int64(n)
		f.size = max(f.size, off)
	}
}

// truncate sets the size as ftruncate does: bytes past it are gone, and read as zero if the
// file grows again.
func (f *file) truncate(size int64) {
	for i := range f.blocks {
		if i*blockSize >= size {
			f.put(i, nil)
		}
	}
	if at := size % blockSize; at != 0 {
		if old := f.blocks[size/blockSize]; old != nil {
			nb := &block{data: old.data}
			clear(nb.data[at:])
			f.put(size/blockSize, nb)
		}
	}
	f.size = size
}

// Image is a file tree: directories, names pointing at inodes, and the inodes' contents.
// Paths are relative to the tree's root, with slashes; "" is the root.
type Image struct {
	dirs   map[string]bool
	names  map[string]uint64 // path → inode
	inodes map[uint64]*file
	owned  map[uint64]bool // inodes this Image copied already: changed in place, no clone shares them
}

// NewImage is an empty tree.
func NewImage() *Image {
	return &Image{dirs: map[string]bool{"": true}, names: map[string]uint64{}, inodes: map[uint64]*file{}, owned: map[uint64]bool{}}
}

// Clone is an independent copy sharing the (immutable) blocks.
func (im *Image) Clone() *Image {
	c := &Image{dirs: make(map[string]bool, len(im.dirs)), names: make(map[string]uint64, len(im.names)),
		inodes: make(map[uint64]*file, len(im.inodes)), owned: map[uint64]bool{}}
	for d := range im.dirs {
		c.dirs[d] = true
	}
	for n, ino := range im.names {
		c.names[n] = ino
	}
	for ino, f := range im.inodes {
		c.inodes[ino] = f // copied on the first change (inode), by either
	}
	clear(im.owned)
	return c
}

// inode returns ino's contents for changing, copying them first if a clone may share them.
func (im *Image) inode(ino uint64) *file {
	f := im.inodes[ino]
	switch {
	case f == nil:
		f = &file{blocks: map[int64]*block{}}
	case !im.owned[ino]:
		f = f.clone()
	default:
		return f
	}
	im.inodes[ino] = f
	im.owned[ino] = true
	return f
}

// Apply makes op happen to the tree at once, as if it had reached the disk. Barriers and ops
// on names that do not exist change nothing.
func (im *Image) Apply(op *Op) {
	switch op.Kind {
	case OpWrite:
		im.inode(op.Ino).write(op.Off, op.Data)
	case OpTruncate:
		im.inode(op.Ino).truncate(op.Size)
	case OpCreate:
		im.names[op.Path] = op.Ino
		if im.inodes[op.Ino] == nil {
			im.inode(op.Ino)
		}
	case OpMkdir:
		im.dirs[op.Path] = true
	case OpUnlink:
		delete(im.names, op.Path)
	case OpRmdir:
		delete(im.dirs, op.Path)
	case OpRename:
		if ino, ok := im.names[op.Path]; ok {
			delete(im.names, op.Path)
			im.names[op.To] = ino
			return
		}
		if im.dirs[op.Path] { // a directory: everything under it moves along
			prefix := op.Path + "/"
			for d := range im.dirs {
				if d == op.Path || strings.HasPrefix(d, prefix) {
					delete(im.dirs, d)
					im.dirs[op.To+strings.TrimPrefix(d, op.Path)] = true
				}
			}
			for n, ino := range im.names {
				if strings.HasPrefix(n, prefix) {
					delete(im.names, n)
					im.names[op.To+"/"+strings.TrimPrefix(n, prefix)] = ino
				}
			}
		}
	}
}

// reachable says whether every directory above p exists: a name in a directory whose own
// entry never reached the disk is lost with it.
func (im *Image) reachable(p string) bool {
	for d := parent(p); d != ""; d = parent(d) {
		if !im.dirs[d] {
			return false
		}
	}
	return true
}

// ReadFile returns a file's whole contents.
func (im *Image) ReadFile(path string) ([]byte, bool) {
	ino, ok := im.names[path]
	if !ok || !im.reachable(path) {
		return nil, false
	}
	f := im.inodes[ino]
	out := make([]byte, f.size)
	for i, b := range f.blocks {
		copy(out[i*blockSize:], b.data[:])
	}
	return out, true
}

// Hash identifies the tree's contents: equal trees (names, sizes, bytes) hash equal, whatever
// their inode numbers. It costs a pass over the names, not over the bytes.
func (im *Image) Hash() uint64 {
	var h uint64
	for d := range im.dirs {
		if im.reachable(d) {
			h += mix(maphash.String(hashSeed, "d:"+d), 1)
		}
	}
	for n, ino := range im.names {
		if !im.reachable(n) {
			continue
		}
		f := im.inodes[ino]
		h += mix(maphash.String(hashSeed, "f:"+n), mix(uint64(f.size), f.sum))
	}
	return h
}

// Materialize writes the tree into dir (which must exist and be empty), sparse: only the blocks
// ever written are written.
func (im *Image) Materialize(dir string) error {
	dirs := make([]string, 0, len(im.dirs))
	for d := range im.dirs {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return cmp.Compare(len(a), len(b)) })
	for _, d := range dirs {
		if d != "" && im.reachable(d) {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
				return fmt.Errorf("lazyfs: materialize %s: %w", d, err)
			}
		}
	}
	for n, ino := range im.names {
		if !im.reachable(n) {
			continue
		}
		if err := writeSparse(filepath.Join(dir, n), im.inodes[ino]); err != nil {
			return fmt.Errorf("lazyfs: materialize %s: %w", n, err)
		}
	}
	return nil
}

func writeSparse(path string, f *file) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for i, b := range f.blocks {
		n := min(int64(blockSize), f.size-i*blockSize)
		if n <= 0 {
			continue
		}
		if _, err := out.WriteAt(b.data[:n], i*blockSize); err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Truncate(f.size); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Scan reads the tree under dir into an Image, keyed by the files' inode numbers (as the mount
// sees them).
func Scan(dir string) (*Image, error) {
	im := NewImage()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			im.dirs[rel] = true
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: %s files are not modelled", p, d.Type())
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		ino := st.Sys().(*syscall.Stat_t).Ino
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		im.Apply(&Op{Kind: OpCreate, Path: rel, Ino: ino})
		f := im.inode(ino)
		for off := 0; off < len(b); off += blockSize { // sparse files stay sparse: zero blocks are not stored
			chunk := b[off:min(off+blockSize, len(b))]
			if slices.ContainsFunc(chunk, func(c byte) bool { return c != 0 }) {
				f.write(int64(off), chunk)
			}
		}
		f.truncate(int64(len(b)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: scan %s: %w", dir, err)
	}
	return im, nil
}
