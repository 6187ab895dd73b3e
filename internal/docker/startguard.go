package docker

import "errors"

// ErrAlreadyStarted is returned (wrapped) by Start for a container that has already run and
// is no longer running. Docker's own start API would run it again — a second incarnation of a
// container the agent may already have reported STOPPED — so Start refuses: the container ran
// once and is never started again (DESIGN.md, "What must hold" 7). The caller treats it as the
// outcome of the start it had lost track of (a failed commit, a restart): the container ran,
// and has exited (inspect it for the exit code).
var ErrAlreadyStarted = errors.New("container has already run: not started again")
