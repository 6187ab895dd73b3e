//go:build linux

package benchmark

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd's process if this one dies first (a test binary
// killed at its timeout runs no deferred cleanup): no control plane outlives its bench.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// yieldToControlPlane lowers this process's CPU priority to the least (nice 19): an agent of
// a fleet run as processes shares the cores with the bench's control plane, which stands for
// a machine of its own. At equal priority the fleet's 200 processes starved it: the payloads
// of the tasks' first start reached the agents over 0–2.4 s (the storm's over 0–0.5 s), so
// each agent's burst began at another moment than the fleet's, and the places learnt from it
// came up to a second early in the storm. The agents still share the cores among themselves:
// the busy host stays in the measure.
func yieldToControlPlane() error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19)
}
