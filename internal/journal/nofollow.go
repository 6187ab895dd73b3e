package journal

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// writePidFile records the daemon's pid beside the journal, for the error another process
// gets. It is called with the journal's exclusive lock held, so a file already there is left
// by a process that died: it is replaced, but only if it is a regular file — a symbolic link
// (planted to make the daemon overwrite its target) is refused. The new file is created
// exclusively and without following links, so a link planted in between is refused too.
func writePidFile(path string) error {
	if st, err := os.Lstat(path); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("pid file %s is not a regular file (%s); refusing to write through it", path, st.Mode().Type())
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("pid file %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	_, werr := f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// openNoFollow is how bbolt opens the journal file: never through a symbolic link, so a link
// planted in the data directory cannot point the daemon's writes at another file.
func openNoFollow(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag|syscall.O_NOFOLLOW, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link; refusing to follow it", name)
	}
	return f, err
}
