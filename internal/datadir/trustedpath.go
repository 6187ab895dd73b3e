package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// CheckPathTrusted refuses a path that a user other than root and the agent could redirect
// before the agent reads it: checking the file at the end (ReadTrusted, the settings file, a
// bind root) is not enough when a directory on the way is someone else's, since they can put
// a link or another root-owned file in its place — a CA file or settings file of their
// choosing, or a bind root turned toward /root. Every directory the path passes through,
// following its links (each link's directory, then its target's), must belong to root or the
// agent's uid and be writable by no group or other, unless it is sticky (like /tmp) and the
// entry the path takes from it belongs to root or the agent (then no one else may rename or
// remove it). The last component itself is not judged: its caller checks what it opened.
//
// Errors name the directory at fault; the caller names the setting. A path that does not
// resolve is refused (a missing entry wraps os.ErrNotExist).
func CheckPathTrusted(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	euid := os.Geteuid()
	trusted := func(uid uint32) bool { return uid == 0 || int(uid) == euid }
	dir, rest, links := "/", strings.Split(abs, "/"), 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			dir = filepath.Dir(dir) // dir holds no link: its parent is the kernel's ".."
			continue
		}
		var ds, es syscall.Stat_t
		entry := filepath.Join(dir, c)
		if err := syscall.Lstat(dir, &ds); err != nil {
			return &os.PathError{Op: "lstat", Path: dir, Err: err}
		}
		if err := syscall.Lstat(entry, &es); err != nil {
			// Refused, not left to the open: in a directory others may write to, the entry
			// could appear between this check and the open.
			return &os.PathError{Op: "lstat", Path: entry, Err: err}
		}
		if !trusted(ds.Uid) {
			return fmt.Errorf("directory %s on its path belongs to uid %d, who could put another file or a link in place of %s (want root or uid %d)", dir, ds.Uid, entry, euid)
		}
		if ds.Mode&0o022 != 0 && (ds.Mode&syscall.S_ISVTX == 0 || !trusted(es.Uid)) {
			return fmt.Errorf("directory %s on its path (mode %04o) is writable by group or others, who could put another file or a link in place of %s (chmod go-w %s)", dir, ds.Mode&0o7777, entry, dir)
		}
		switch es.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			if links++; links > 40 {
				return fmt.Errorf("%s: too many links", path)
			}
			target, err := os.Readlink(entry)
			if err != nil {
				return err
			}
			if filepath.IsAbs(target) {
				dir = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
		case syscall.S_IFDIR:
			dir = entry
		default:
			return nil
		}
	}
	return nil
}
