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
