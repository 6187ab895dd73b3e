//go:build !linux

package benchmark

import "os/exec"

// dieWithParent: only Linux can tie a child's life to its parent's; elsewhere the bench's
// own cleanup stops the child.
func dieWithParent(*exec.Cmd) {}

// yieldToControlPlane: the fleet's agents keep their priority off Linux.
func yieldToControlPlane() error { return nil }
