package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrDamaged is wrapped by Open when the file is not a sound bbolt file: empty, truncated, with
// both meta pages bad, or with a page of its tree that bbolt could not walk safely.
var ErrDamaged = errors.New("damaged journal file")

// DamageError names where a journal file is damaged, found by reading it before bbolt maps it.
type DamageError struct {
	Path   string
	Page   uint64 // 0 when the damage concerns the file as a whole (size, meta pages)
	Offset int64  // byte offset of the page, or of the file's end
	What   string
}

func (e *DamageError) Error() string {
	where := "file"
	if e.Page != 0 {
		where = fmt.Sprintf("page %d (offset %d)", e.Page, e.Offset)
	}
	return fmt.Sprintf("%s: %s is damaged: %s: %s; the file was not changed: keep it for inspection, and restore an "+
		"earlier copy (agentd journal export) or move it aside to start a new journal knowingly", ErrDamaged, e.Path, where, e.What)
}

func (e *DamageError) Unwrap() error { return ErrDamaged }

// The bbolt v1.5 file format, as far as a walk of it needs (go.etcd.io/bbolt/internal/common).
// The numbers are little-endian on every platform Go and bbolt support here.
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeader     = 16 // id u64, flags u16, count u16, overflow u32
	boltElement        = 16 // leaf: flags u32, pos u32, ksize u32, vsize u32; branch: pos u32, ksize u32, pgid u64
	boltBucketHeader   = 16 // root pgid u64, sequence u64
	boltMetaSize       = 64 // magic, version, pageSize, flags u32; root u64, seq u64, freelist, pgid, txid, checksum u64
	boltBranch         = 0x01
	boltLeaf           = 0x02
	boltMetaPage       = 0x04
	boltFreelist       = 0x10
	boltBucketLeafFlag = 0x01
	boltNoFreelist     = ^uint64(0)
)

type boltMeta struct {
	page                      uint64
	pageSize                  uint32
	root, freelist, hwm, txid uint64
	headerID                  uint64
	headerFlags               uint16
	invalid                   string // why it fails bbolt's own validation, "" if it passes
	magic, version, flags     uint32
}

// checkFile reads the file at path with plain reads, before bbolt maps it, and returns a
// *DamageError for anything that would make bbolt panic (its open-time freelist scan runs in
// a goroutine no recover reaches) or die of SIGBUS (a page past the end of the file): an empty
// or truncated file, a size that is not a whole number of pages, both meta pages bad, and, in
// the tree the chosen meta page roots, any page whose header or elements are not sane — wrong
// id or type, elements or overflow beyond the page or the file, keys out of order, a page
// referenced twice. A path that does not exist is no damage: it is a new journal.
//
// A file another agentd holds is not read (it may be mid-commit): that is ErrLocked, named by
// the lock exactly as bbolt's own open would, after waiting at most timeout.
func checkFile(path string, timeout time.Duration) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	// A shared lock keeps a writer out while the file is read; it is dropped (with the file)
	// before bbolt takes its own lock, which a shared lock on another descriptor would block.
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w%s", ErrLocked, lockHolder(path))
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return &DamageError{Path: path, What: "not a regular file"}
	}
	c := &fileCheck{f: f, path: path, size: st.Size()}
	return c.run()
}

type fileCheck struct {
	f    *os.File
	path string
	size int64
	ps   int64
	hwm  uint64
	seen []uint64 // a bit per page: referenced already
	bufs [][]byte // one page buffer per tree depth, reused: the walk reads every page once
}

func (c *fileCheck) damage(page uint64, what string, args ...any) error {
	e := &DamageError{Path: c.path, Page: page, What: fmt.Sprintf(what, args...)}
	if page != 0 {
		e.Offset = int64(page) * c.ps
	}
	return e
}

func (c *fileCheck) run() error {
	if c.size == 0 {
		return c.damage(0, "the file is empty (0 bytes): it holds no journal id, agent id or record, and a new journal is never started in its place")
	}
	m0 := c.readMeta(0, 0)
	var ps int64
	if m0.invalid == "" {
		ps = int64(m0.pageSize)
	} else {
		// Page 0 is bad, so its page size is unknown: look for page 1 where bbolt would, at
		// every page size it supports.
		for s := int64(1024); s <= 1<<24 && s < c.size; s <<= 1 {
			if m := c.readMeta(1, s); m.invalid == "" && int64(m.pageSize) == s {
				ps = s
				break
			}
		}
		if ps == 0 {
			return c.damage(0, "both meta pages are bad (page 0: %s; page 1 not found at any page size)", m0.invalid)
		}
	}
	c.ps = ps
	if c.size%ps != 0 {
		return c.damage(0, "its size %d bytes is not a whole number of %d-byte pages: truncated or extended", c.size, ps)
	}
	if c.size < 4*ps {
		return c.damage(0, "its size %d bytes is less than the 4 pages of an empty bbolt file: truncated", c.size)
	}
	m1 := c.readMeta(1, ps)
	var m boltMeta
	switch {
	case m0.invalid != "" && m1.invalid != "":
		return c.damage(0, "both meta pages are bad (page 0: %s; page 1: %s)", m0.invalid, m1.invalid)
	case m0.invalid != "":
		m = m1
	case m1.invalid != "":
		m = m0
	case m1.txid > m0.txid:
		m = m1
	default:
		m = m0
	}
	// A meta page that passes its checksum but not its (unchecksummed) header is damage bbolt's
	// own check would trip over.
	for _, mm := range []boltMeta{m0, m1} {
		if mm.invalid == "" && (mm.headerID != mm.page || mm.headerFlags != boltMetaPage) {
			return c.damage(0, "meta page %d has a bad header (id %d, type 0x%02x)", mm.page, mm.headerID, mm.headerFlags)
		}
	}
	// bbolt uses the valid meta page with the higher transaction id; everything below is about
	// the tree that one roots.
	c.hwm = m.hwm
	if m.hwm < 4 || int64(m.hwm) > c.size/ps {
		return c.damage(0, "truncated: meta page %d (transaction %d) says the file holds %d pages (%d bytes) but it has %d bytes",
			m.page, m.txid, m.hwm, int64(m.hwm)*ps, c.size)
	}
	c.seen = make([]uint64, (m.hwm+63)/64)
	c.mark(0)
	c.mark(1)
	if m.freelist != boltNoFreelist {
		if err := c.checkFreelist(m.freelist); err != nil {
			return err
		}
	}
	if m.root < 2 || m.root >= m.hwm {
		return c.damage(0, "meta page %d points the root bucket at page %d, outside pages 2..%d", m.page, m.root, m.hwm-1)
	}
	return c.walk(m.root, nil, nil, "", 0)
}

// readMeta reads meta page n assuming page size ps (0: page 0, whose size is not known yet).
func (c *fileCheck) readMeta(n uint64, ps int64) boltMeta {
	m := boltMeta{page: n}
	buf := make([]byte, boltPageHeader+boltMetaSize)
	if _, err := c.f.ReadAt(buf, int64(n)*ps); err != nil {
		m.invalid = "cannot be read: " + err.Error()
		return m
	}
	le := binary.LittleEndian
	m.headerID, m.headerFlags = le.Uint64(buf[0:]), le.Uint16(buf[8:])
	b := buf[boltPageHeader:]
	m.magic, m.version, m.pageSize, m.flags = le.Uint32(b[0:]), le.Uint32(b[4:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	m.root, m.freelist, m.hwm, m.txid = le.Uint64(b[16:]), le.Uint64(b[32:]), le.Uint64(b[40:]), le.Uint64(b[48:])
	h := fnv.New64a()
	h.Write(b[:56])
	switch {
	case m.magic != boltMagic:
		m.invalid = fmt.Sprintf("magic %#x, not a bbolt file", m.magic)
	case m.version != boltVersion:
		m.invalid = fmt.Sprintf("bbolt format version %d, want %d", m.version, boltVersion)
	case h.Sum64() != le.Uint64(b[56:]):
		m.invalid = "checksum mismatch"
	case m.pageSize < 512 || m.pageSize > 1<<24 || m.pageSize&(m.pageSize-1) != 0:
		m.invalid = fmt.Sprintf("page size %d", m.pageSize)
	}
	return m
}

func (c *fileCheck) mark(p uint64)        { c.seen[p/64] |= 1 << (p % 64) }
func (c *fileCheck) marked(p uint64) bool { return c.seen[p/64]&(1<<(p%64)) != 0 }

// page reads page id with its overflow pages into the buffer of tree depth depth, after
// checking its header: its own id, a type in want, and an overflow that stays inside the high
// water mark. The bytes stay valid until the next page read at the same depth.
func (c *fileCheck) page(id uint64, want uint16, in string, depth int) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, c.damage(0, "%sa page reference %d is outside pages 2..%d", in, id, c.hwm-1)
	}
	for len(c.bufs) <= depth {
		c.bufs = append(c.bufs, make([]byte, c.ps))
	}
	// One read for the page (its header first), a second only for overflow pages.
	first := c.bufs[depth][:c.ps]
	if _, err := c.f.ReadAt(first, int64(id)*c.ps); err != nil {
		return nil, c.damage(id, "%scannot be read: %v", in, err)
	}
	le := binary.LittleEndian
	gotID, flags, overflow := le.Uint64(first[0:]), le.Uint16(first[8:]), uint64(le.Uint32(first[12:]))
	if gotID != id {
		return nil, c.damage(id, "%sits header says it is page %d", in, gotID)
	}
	if flags&want == 0 || flags&(flags-1) != 0 {
		return nil, c.damage(id, "%sits type 0x%02x is not %s", in, flags, pageTypes(want))
	}
	if id+overflow >= c.hwm {
		return nil, c.damage(id, "%sits %d overflow pages run past the last page %d", in, overflow, c.hwm-1)
	}
	for p := id; p <= id+overflow; p++ {
		if c.marked(p) {
			return nil, c.damage(id, "%spage %d is referenced twice", in, p)
		}
		c.mark(p)
	}
	if overflow == 0 {
		return first, nil
	}
	size := int64(overflow+1) * c.ps
	if int64(cap(c.bufs[depth])) < size {
		grown := make([]byte, size)
		copy(grown, first)
		c.bufs[depth] = grown
	}
	buf := c.bufs[depth][:size]
	if _, err := c.f.ReadAt(buf[c.ps:], int64(id+1)*c.ps); err != nil {
		return nil, c.damage(id, "%scannot be read: %v", in, err)
	}
	return buf, nil
}

func pageTypes(want uint16) string {
	var s []string
	for _, t := range []struct {
		f    uint16
		name string
	}{{boltBranch, "branch"}, {boltLeaf, "leaf"}, {boltFreelist, "freelist"}} {
		if want&t.f != 0 {
			s = append(s, t.name)
		}
	}
	return strings.Join(s, " or ")
}

func (c *fileCheck) checkFreelist(id uint64) error {
	buf, err := c.page(id, boltFreelist, "the freelist: ", 0)
	if err != nil {
		return err
	}
	le := binary.LittleEndian
	n, start := uint64(le.Uint16(buf[10:])), uint64(boltPageHeader)
	if n == 0xFFFF {
		n, start = le.Uint64(buf[boltPageHeader:]), start+8
	}
	if n > (uint64(len(buf))-start)/8 {
		return c.damage(id, "the freelist claims %d entries, more than its pages hold", n)
	}
	for i := uint64(0); i < n; i++ {
		if p := le.Uint64(buf[start+8*i:]); p < 2 || p >= c.hwm {
			return c.damage(id, "the freelist lists page %d, outside pages 2..%d", p, c.hwm-1)
		}
	}
	return nil
}

// walk checks the subtree rooted at page id of bucket path, whose keys must lie in [lo, hi)
// (nil: unbounded), and every bucket it holds.
func (c *fileCheck) walk(id uint64, lo, hi []byte, path string, depth int) error {
	if depth > 64 {
		return c.damage(id, "the tree is more than 64 levels deep: a reference loop")
	}
	in := ""
	if path != "" {
		in = "in bucket " + strconv.Quote(path) + ": "
	}
	buf, err := c.page(id, boltBranch|boltLeaf, in, depth)
	if err != nil {
		return err
	}
	return c.elements(id, buf, lo, hi, path, in, depth)
}

// element is one decoded element of a branch or leaf page.
type element struct {
	key, val []byte
	child    uint64 // branch: the child page
	bucket   bool   // leaf: the value is a bucket
}

// element decodes element i of a page (or inline bucket) buf of the given type, checking that
// it lies inside buf.
func (c *fileCheck) element(id uint64, buf []byte, branch bool, i uint64, in string) (element, error) {
	le := binary.LittleEndian
	at := uint64(boltPageHeader + i*boltElement)
	e := buf[at:]
	var pos, ksize, vsize uint64
	var el element
	if branch {
		pos, ksize, el.child = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:])), le.Uint64(e[8:])
	} else {
		f := le.Uint32(e[0:])
		if f&^boltBucketLeafFlag != 0 {
			return el, c.damage(id, "%selement %d has unknown flags 0x%x", in, i, f)
		}
		el.bucket = f&boltBucketLeafFlag != 0
		pos, ksize, vsize = uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
	}
	if at+pos+ksize+vsize > uint64(len(buf)) {
		return el, c.damage(id, "%selement %d (key %d bytes, value %d bytes at +%d) runs past the page's %d bytes", in, i, ksize, vsize, pos, len(buf))
	}
	el.key = buf[at+pos : at+pos+ksize]
	el.val = buf[at+pos+ksize : at+pos+ksize+vsize]
	return el, nil
}

// elements checks the elements of one branch or leaf page (buf, which for an inline bucket is
// the value holding it) and descends into its children and buckets: first every element and
// the order of the keys, then the subtrees.
func (c *fileCheck) elements(id uint64, buf, lo, hi []byte, path, in string, depth int) error {
	le := binary.LittleEndian
	flags, n := le.Uint16(buf[8:]), uint64(le.Uint16(buf[10:]))
	branch := flags == boltBranch
	if boltPageHeader+n*boltElement > uint64(len(buf)) {
		return c.damage(id, "%sits %d elements do not fit in its %d bytes", in, n, len(buf))
	}
	if branch && n == 0 {
		return c.damage(id, "%sa branch page with no elements", in)
	}
	var prev []byte
	for i := uint64(0); i < n; i++ {
		el, err := c.element(id, buf, branch, i, in)
		if err != nil {
			return err
		}
		if i == 0 && lo != nil && bytes.Compare(el.key, lo) < 0 {
			return c.damage(id, "%sthe first key %q sorts before its parent's key %q", in, abbrev(el.key), abbrev(lo))
		}
		if i > 0 && bytes.Compare(prev, el.key) >= 0 {
			return c.damage(id, "%skey %d %q does not sort after key %d %q", in, i, abbrev(el.key), i-1, abbrev(prev))
		}
		if hi != nil && bytes.Compare(el.key, hi) >= 0 {
			return c.damage(id, "%skey %d %q does not sort before its parent's next key %q", in, i, abbrev(el.key), abbrev(hi))
		}
		prev = el.key
	}
	for i := uint64(0); i < n; i++ {
		el, _ := c.element(id, buf, branch, i, in) // checked above
		switch {
		case branch:
			next := hi
			if i+1 < n {
				nx, _ := c.element(id, buf, branch, i+1, in)
				next = nx.key
			}
			if err := c.walk(el.child, el.key, next, path, depth+1); err != nil {
				return err
			}
		case el.bucket:
			sub := string(el.key)
			if path != "" {
				sub = path + "/" + sub
			}
			if len(el.val) < boltBucketHeader {
				return c.damage(id, "%sbucket %q has a %d-byte header, want %d", in, sub, len(el.val), boltBucketHeader)
			}
			if root := le.Uint64(el.val); root != 0 {
				if err := c.walk(root, nil, nil, sub, depth+1); err != nil {
					return err
				}
				continue
			}
			// An inline bucket: its single leaf page is stored in the value itself.
			inline := el.val[boltBucketHeader:]
			subIn := "in bucket " + strconv.Quote(sub) + " (inline): "
			if len(inline) < boltPageHeader {
				return c.damage(id, "%sits page is %d bytes, shorter than a page header", subIn, len(inline))
			}
			if f := le.Uint16(inline[8:]); f != boltLeaf {
				return c.damage(id, "%sits page type 0x%02x is not leaf", subIn, f)
			}
			if err := c.elements(id, inline, nil, nil, sub, subIn, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func abbrev(b []byte) string {
	if len(b) > 24 {
		return string(b[:24]) + "…"
	}
	return string(b)
}

// openBolt is bolt.Open with the panics it can raise in the caller's goroutine (its freelist
// scan panics on any inconsistency it finds) turned into an error naming the file. checkFile
// has already refused what would panic elsewhere; this is the last line, not the first.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &DamageError{Path: path, What: fmt.Sprintf("bbolt refused it: %v", r)}
		}
	}()
	return bolt.Open(path, 0o600, opts)
}
