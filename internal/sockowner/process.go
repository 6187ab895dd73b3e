package sockowner

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// lastHolder remembers the last socket named and its holder: the agent asks again for the
// same squatter on every retry of its listener, and a local user holding many descriptors
// would otherwise make each retry walk them all again.
var lastHolder struct {
	sync.Mutex
	inode uint64
	pid   int
	walks int // descriptor-table walks made (tests)
}

// processOf finds a process holding the socket with this inode among the descriptors this
// process may see (0: none seen). It walks every process's descriptor table, so it serves
// only to name a holder in an error or a health problem, never a lookup on a request's path;
// the same inode asked again costs one look at the holder found last.
func processOf(inode uint64) int {
	if inode == 0 {
		return 0
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	lastHolder.Lock()
	defer lastHolder.Unlock()
	if lastHolder.inode == inode && (lastHolder.pid == 0 || holds(lastHolder.pid, want)) {
		return lastHolder.pid
	}
	lastHolder.walks++
	lastHolder.inode, lastHolder.pid = inode, walkFor(want)
	return lastHolder.pid
}

// holds says whether process pid has a descriptor on the socket want names.
func holds(pid int, want string) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if link, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && link == want {
			return true
		}
	}
	return false
}

// walkFor finds the first process holding the socket want names (0: none seen).
func walkFor(want string) int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if holds(pid, want) { // false too for one gone, or another user's (no CAP_SYS_PTRACE)
			return pid
		}
	}
	return 0
}
