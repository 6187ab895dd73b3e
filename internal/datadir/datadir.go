// Package datadir checks the agent's data directory before anything in it is trusted: the
// journal, the seal key and the pid file live there, so whoever can write to the directory
// could swap them, plant a symlink that turns the daemon's writes against another file, or
// read the key.
//
// It promises: a missing directory is created 0700; an existing one that group or others may
// write to, or that another user owns, is refused with an error naming it and the fix; a
// symbolic link in place of one of the agent's own files is refused. ReadPrivate holds the
// checks of a file carrying a secret (the seal key, --registry-auth-file), so every such file
// is checked the same way, on every read.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Prepare creates dir (0700) when missing and checks it and the named files in it.
func Prepare(dir string, files ...string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := mkdirDurable(dir); err != nil {
			return fmt.Errorf("--data-dir %s: %w", dir, err)
		}
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("--data-dir %s: not a directory", dir)
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("--data-dir %s: mode %04o lets group or others write to it, so they could swap the journal or the seal key: chmod 700 %s", dir, perm, dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("--data-dir %s: owned by uid %d, not by this agent's uid %d: chown it, or use a directory of this user", dir, sys.Uid, os.Geteuid())
	}
	for _, f := range files {
		p := filepath.Join(dir, f)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("--data-dir %s: %w", dir, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("--data-dir %s: %s is a symbolic link; the agent never writes through one (remove it)", dir, p)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("--data-dir %s: %s is not a regular file", dir, p)
		}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
			return fmt.Errorf("--data-dir %s: %s is owned by uid %d, not by this agent's uid %d", dir, p, sys.Uid, os.Geteuid())
		}
	}
	return nil
}

// mkdirDurable creates dir and its missing parents (0700), and syncs the directory above each
// one it created: otherwise a power cut can take the new directory's entry, and with it the
// journal and the seal key the agent then writes and syncs inside (issue 44).
func mkdirDurable(dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := SyncDir(filepath.Dir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// SyncDir fsyncs a directory, making the entries created, renamed or removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
