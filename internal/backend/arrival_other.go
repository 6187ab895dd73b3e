//go:build !linux

package backend

import (
	"syscall"
	"time"
)

// sinceLastReceived says nothing off Linux: the answer's arrival is the read's own time.
func sinceLastReceived(syscall.RawConn) (time.Duration, bool) { return 0, false }
