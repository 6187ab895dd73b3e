package docker

import (
	"errors"
	"fmt"
	"time"
)

// ErrAlreadyStarted is returned (wrapped) by Start for a container that has already run and
// is no longer running. Docker's own start API would run it again — a second incarnation of a
// container the agent may already have reported STOPPED — so Start refuses: the container ran
// once and is never started again (DESIGN.md, "What must hold" 7). The caller treats it as the
// outcome of the start it had lost track of (a failed commit, a restart): the container ran,
// and has exited (inspect it for the exit code).
var ErrAlreadyStarted = errors.New("container has already run: not started again")

// checkStart is the start guard both runtimes apply, from a fresh inspect of the container
// just before their start call: a container never started may be started; a running one needs
// nothing (the start already happened — it is the same incarnation); one that has run and
// stopped is refused with ErrAlreadyStarted.
func checkStart(st State) (alreadyRunning bool, err error) {
	switch {
	case st.Running:
		return true, nil
	case st.Exited || !st.StartedAt.IsZero():
		when := ""
		if !st.FinishedAt.IsZero() {
			when = " at " + st.FinishedAt.UTC().Format(time.RFC3339Nano)
		}
		return false, fmt.Errorf("start %s: %w (exited %d%s)", st.ID, ErrAlreadyStarted, st.ExitCode, when)
	}
	return false, nil
}
