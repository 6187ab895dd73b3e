package sockowner

import (
	"os"
	"path/filepath"
	"strconv"
)

// processOf finds a process holding the socket with this inode among the descriptors this
// process may see (0: none seen). It walks every process's descriptor table, so it serves
// only to name a holder in an error or a health problem, never a lookup on a request's path.
func processOf(inode uint64) int {
	if inode == 0 {
		return 0
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or another user's (no CAP_SYS_PTRACE)
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && link == want {
				return pid
			}
		}
	}
	return 0
}
