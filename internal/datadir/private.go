package datadir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ReadPrivate reads a file that holds a secret (the seal key, the registry credentials) and
// refuses it unless it is the agent's own: a regular file, not a symbolic link (so a link
// planted in its place cannot hand the agent another file, or another user's secret), owned
// by the agent's uid (whoever owns it can rewrite it), with no permission for group or others
// (a secret they can read is no longer one), and at most limit bytes (a secret file is small;
// a huge one, or a device, is a mistake to refuse rather than read).
//
// The checks are made on the opened file, so a swap between a check and the read cannot slip
// another file past them. Opening never blocks (a FIFO in its place is refused, not waited
// on). Errors do not name the path: the caller says which file and flag it is. A missing file
// is an error that wraps os.ErrNotExist. The FileInfo is the opened file's.
func ReadPrivate(path string, limit int64) ([]byte, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, errors.New("is a symbolic link; refusing to follow it (name the file itself)")
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file but %s", kindOf(st.Mode()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return nil, nil, fmt.Errorf("owned by uid %d, not by this agent's uid %d, who alone may write it: chown %d %s", sys.Uid, os.Geteuid(), os.Geteuid(), path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, nil, fmt.Errorf("mode %04o lets group or others read or write it; want 0600 (chmod 600 %s)", perm, path)
	}
	if st.Size() > limit {
		return nil, nil, fmt.Errorf("%d bytes, more than the %d such a file may hold", st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(b)) > limit {
		return nil, nil, fmt.Errorf("more than the %d bytes such a file may hold", limit)
	}
	return b, st, nil
}

func kindOf(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// ReadTrusted reads a file the agent trusts but need not keep secret (a CA bundle naming whom
// the agent believes): whoever can write it decides whom the agent talks to, so it is refused
// unless it is a regular file owned by root or the agent's uid, writable by no group or other,
// and at most limit bytes. A symbolic link is followed (CA bundles are often links into
// /etc/ssl), and the checks are made on the file opened at its end. Opening never blocks: a
// FIFO in its place is refused, not waited on. Errors do not name the path (the caller says
// which file and setting it is); a missing file wraps os.ErrNotExist. The path to it is
// checked too (CheckPathTrusted): a directory others can write would let them swap the file.
func ReadTrusted(path string, limit int64) ([]byte, error) {
	if err := CheckPathTrusted(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file but %s", kindOf(st.Mode()))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("owned by uid %d, neither root nor this agent's uid %d: its owner could change whom the agent trusts", sys.Uid, os.Geteuid())
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("mode %04o lets group or others write it, and so change whom the agent trusts (chmod go-w %s)", perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than the %d bytes such a file may hold", limit)
	}
	return b, nil
}

// CABundleLimit bounds a CA file: Debian's whole system bundle is about 220 KB.
const CABundleLimit = 4 << 20
