package runtime

import "errors"

// The errors every runtime returns (wrapped) for what its callers must tell apart: the
// engine reads a container gone, a name held, an image kept, a start refused and a runtime
// down each its own way.

// ErrNotFound is returned (wrapped) for a container the runtime does not have.
var ErrNotFound = errors.New("container not found")

// ErrImageInUse is returned (wrapped) by RemoveImage for an image a container (running or
// not) still uses, or one other references still name: it is left as it is (never forced),
// and the agent's claim on it ends.
var ErrImageInUse = errors.New("image in use")

// ErrNameTaken is returned (wrapped) by Create when the container's name is held by a
// container that is not this one (another agent's, or not agentd's): a failure of this
// container alone, which the error names, never of the runtime.
var ErrNameTaken = errors.New("name taken")

// ErrUnavailable is returned (wrapped) when the runtime itself cannot be reached: the call may
// succeed later and says nothing about the container.
var ErrUnavailable = errors.New("runtime unavailable")

// ErrAlreadyStarted is returned (wrapped) by Start for a container that has already run and
// is no longer running. Docker's own start API would run it again — a second incarnation of a
// container the agent may already have reported STOPPED — so Start refuses: the container ran
// once and is never started again (DESIGN.md, "What must hold" 7). The caller treats it as the
// outcome of the start it had lost track of (a failed commit, a restart): the container ran,
// and has exited (inspect it for the exit code).
var ErrAlreadyStarted = errors.New("container has already run: not started again")

// ErrRunning is returned (wrapped) by RemoveUnlessStarted for a container that runs (the
// engine refused to remove it: Docker's 409, Podman's "container state improper") or has run
// and exited: either way it started, and is not removed.
var ErrRunning = errors.New("container is running or has run")
