package sockowner_test

import (
	"net"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/sockowner"
)

// TestAServerEndNobodyHoldsIsJudgedByItsListener: a listener of uid 65534 with
// TCP_DEFER_ACCEPT keeps each connection a request socket until the client writes — the
// kernel's socket diagnostics report a request socket (and a closed one) as uid 0 with no
// inode. The client's check must not read that as root's: it is refused naming uid 65534
// before anything is written (a squatter with TCP_DEFER_ACCEPT received root's
// Agentd-Client header and API token).
func TestAServerEndNobodyHoldsIsJudgedByItsListener(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the listener is made as uid 65534")
	}
	for _, via := range []struct {
		name string
		diag bool
	}{{"sock_diag", true}, {"proc_table", false}} {
		t.Run(via.name, func(t *testing.T) {
			defer sockowner.SetUseDiag(via.diag)()
			ln := deferredListener(t, 65534)
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := sockowner.CheckServer(c); err == nil || !strings.Contains(err.Error(), "uid 65534") {
				t.Errorf("uid 65534's deferred listener %s: %v; want a refusal naming uid 65534", ln.Addr(), err)
			}
		})
	}
}

// deferredListener is a loopback listener with TCP_DEFER_ACCEPT whose socket uid made (the
// kernel gives a socket its creator's file-system uid: set on this thread only, meanwhile).
func deferredListener(t *testing.T, uid int) net.Listener {
	t.Helper()
	runtime.LockOSThread()
	unix.Setfsuid(uid)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	unix.Setfsuid(0)
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "deferred")
	defer f.Close()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 30); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		t.Fatal(err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if s, err := sockowner.Listening(ln.Addr().(*net.TCPAddr)); err != nil || s.UID != int64(uid) {
		t.Fatalf("the listener made as uid %d: %+v, %v", uid, s, err)
	}
	return ln
}
