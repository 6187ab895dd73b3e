package backend

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sinceLastReceived is how long ago the kernel last received data on the connection.
func sinceLastReceived(raw syscall.RawConn) (time.Duration, bool) {
	var since time.Duration
	ok := false
	_ = raw.Control(func(fd uintptr) {
		if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			since, ok = time.Duration(ti.Last_data_recv)*time.Millisecond, true
		}
	})
	return since, ok
}
