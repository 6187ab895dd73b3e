package docker

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// What a bind volume's descriptor number names once the agent lets go of its source (issue 41).
// The engine resolves /proc/<agent pid>/fd/<n> on every mount of the volume — not only the
// start the agent makes, but an operator's later `docker start` of the stopped container, or a
// `docker cp` into it. Closed, n would be the next descriptor the agent opens: another task's
// bind source, the journal, any host directory. So n is never closed while the volume exists:
// once the container's start is answered, n is made (dup3, in one step, so n is never free) a
// copy of one empty memfd — a file, not a directory, on no mount of any namespace — which the
// kernel refuses to bind onto the volume's directory: such a mount fails, naming nothing of the
// host. The source's directory is let go (its place in the bound given back, bindbound.go);
// n itself is closed only with the volume.
//
// Why not the alternatives: holding the source open for the container's life pins a host
// directory (and the bound) for hours after the start, for a mount nothing of the agent's makes
// again; a per-container directory under the data directory with the source mounted on it
// needs CAP_SYS_ADMIN and the mount system calls, which the shipped unit denies the agent
// (CapabilityBoundingSet=, SystemCallFilter=@system-service).

var inert struct {
	once sync.Once
	fd   int
	err  error
}

// placeOver makes f's descriptor number name the inert memfd; f keeps the number (closing f
// closes the placeholder).
func placeOver(f *os.File) error {
	inert.once.Do(func() {
		inert.fd, inert.err = unix.MemfdCreate("agentd-bind-let-go", unix.MFD_CLOEXEC)
	})
	if inert.err != nil {
		return fmt.Errorf("memfd_create: %w", inert.err)
	}
	return unix.Dup3(inert.fd, int(f.Fd()), unix.O_CLOEXEC)
}

// letGo lets go of a bind volume's source once its container's start was answered (or the
// container will never be started by the agent): its descriptor number stays, naming the
// placeholder, until the volume is removed. A placeholder that cannot be put in place keeps the
// source: the number still names what the task was given.
func (e *Engine) letGo(name string) {
	e.bindMu.Lock()
	defer e.bindMu.Unlock()
	f, held := e.bindVols[name]
	if _, done := e.bindLetGo[name]; !held || done {
		return
	}
	if err := placeOver(f); err != nil {
		return
	}
	e.bindLetGo[name] = struct{}{}
	e.bindBound.started(1)
}

// sourceHeld says whether a bind volume's source is still held by this process (made by it,
// and its container's start not yet answered).
func (e *Engine) sourceHeld(name string) bool {
	e.bindMu.Lock()
	defer e.bindMu.Unlock()
	_, held := e.bindVols[name]
	_, let := e.bindLetGo[name]
	return held && !let
}
