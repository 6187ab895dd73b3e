package lazyfs

// The mount's nodes and handles: go-fuse's loopback with every change logged (FS.record) and
// every fsync turned into a barrier instead of a sync of the backing directory. Invariant: no
// change reaches the backing directory without its op in the log, in the same order — so
// nothing of the loopback that could change a file behind the log (passthrough,
// copy_file_range, fallocate, links, O_TMPFILE) is left reachable.

import (
	"context"
	"path"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.FileWriter         = (*handle)(nil)
	_ fs.FileFsyncer        = (*handle)(nil)
	_ fs.FileSetattrer      = (*handle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
)

// WrapChild makes every node of the tree one of ours.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *node) rel(name string) string {
	return path.Join(n.Path(nil), name)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (inode *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	op := &Op{Kind: OpCreate, Path: n.rel(name)}
	errno = n.fs.record(op, func() syscall.Errno {
		inode, fh, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		if errno == 0 {
			op.Ino = inode.StableAttr().Ino
		}
		return errno
	})
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 { // an existing file opened through create: its bytes go too
		n.fs.record(&Op{Kind: OpTruncate, Ino: op.Ino, Path: op.Path}, func() syscall.Errno { return 0 })
	}
	return inode, &handle{lf: fh.(*fs.LoopbackFile), n: inode.Operations().(*node)}, fuseFlags, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	var fh fs.FileHandle
	var fuseFlags uint32
	do := func() (errno syscall.Errno) {
		fh, fuseFlags, errno = n.LoopbackNode.Open(ctx, flags)
		return errno
	}
	var errno syscall.Errno
	if flags&syscall.O_TRUNC != 0 {
		errno = n.fs.record(&Op{Kind: OpTruncate, Ino: n.StableAttr().Ino, Path: n.Path(nil)}, do)
	} else {
		errno = do()
	}
	if errno != 0 {
		return nil, 0, errno
	}
	return &handle{lf: fh.(*fs.LoopbackFile), n: n}, fuseFlags, 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		f = h.lf
	}
	sz, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	}
	return n.fs.record(&Op{Kind: OpTruncate, Ino: n.StableAttr().Ino, Path: n.Path(nil), Size: int64(sz)}, func() syscall.Errno {
		return n.LoopbackNode.Setattr(ctx, f, in, out)
	})
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	errno = n.fs.record(&Op{Kind: OpMkdir, Path: n.rel(name)}, func() syscall.Errno {
		ch, errno = n.LoopbackNode.Mkdir(ctx, name, mode, out)
		return errno
	})
	return ch, errno
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.fs.record(&Op{Kind: OpUnlink, Path: n.rel(name)}, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.fs.record(&Op{Kind: OpRmdir, Path: n.rel(name)}, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || flags&^uint32(unix.RENAME_NOREPLACE) != 0 { // an exchange is not modelled
		return syscall.ENOTSUP
	}
	return n.fs.record(&Op{Kind: OpRename, Path: n.rel(name), To: np.rel(newName)}, func() syscall.Errno {
		return n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags)
	})
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{ds: fh, n: n}, fuseFlags, 0
}

// The loopback's ways of changing files behind the log are refused.

func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOTSUP
}

// handle is an open file: the loopback's, with writes logged and fsync a barrier. It offers
// no PassthroughFd (the kernel would write to the backing file past the log) and no Allocate.
type handle struct {
	lf *fs.LoopbackFile
	n  *node
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (written uint32, errno syscall.Errno) {
	op := &Op{Kind: OpWrite, Ino: h.n.StableAttr().Ino, Path: h.n.Path(nil), Off: off}
	errno = h.n.fs.record(op, func() syscall.Errno {
		written, errno = h.lf.Write(ctx, data, off)
		op.Data = append([]byte(nil), data[:written]...)
		return errno
	})
	return written, errno
}

// Fsync is the barrier; the backing directory is the cache, not the disk, so it is not synced.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.n.fs.record(&Op{Kind: OpFsync, Ino: h.n.StableAttr().Ino, Path: h.n.Path(nil)}, func() syscall.Errno { return 0 })
}

func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

// Setattr comes through node.Setattr, which logs a truncate.
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}

func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}

func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// dirHandle is an open directory: the loopback's, with fsync a barrier for its entries.
type dirHandle struct {
	ds fs.FileHandle
	n  *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.fs.record(&Op{Kind: OpFsyncDir, Path: d.n.Path(nil)}, func() syscall.Errno { return 0 })
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}
