//go:build !runtimebug

package runtime

import (
	"fmt"
	"time"
)

// CheckStart (built without the runtimebug tag; startcheck_runtimebug.go has Docker's
// behaviour instead, so a test run with -tags runtimebug shows what finds the guard missing)
// is the start guard both runtimes apply, from a fresh inspect of the container
// just before their start call: a container never started may be started; a running one needs
// nothing (the start already happened — it is the same incarnation); one that has run and
// stopped is refused with ErrAlreadyStarted.
func CheckStart(st State) (alreadyRunning bool, err error) {
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
