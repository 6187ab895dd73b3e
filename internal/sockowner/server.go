package sockowner

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Before one of the agent's own clients sends its header or a token, it checks who serves
// the address it dialled: on this host, only root or the client's own user may (the agent
// runs as one of them). Anyone else — a local user who bound the API's port while the agent
// was down — gets nothing: the connection is closed before a byte is written, and the error
// names the address, the process and the user (issue 41).

// CheckServer returns nil when root or this process's user holds the other end of c (or, for
// a unix socket, the owner of a directory only it may write: socketDirOwner), and otherwise an
// error naming who does. A TCP peer that is not on this host (its address is
// none of this host's) is not checked: nothing local can stand in for it.
func CheckServer(c net.Conn) error {
	uid, pid, err := serverOf(c)
	if errors.Is(err, errRemote) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: cannot tell who serves it, so nothing is sent to it: %w", name(c), err)
	}
	if me := os.Geteuid(); uid != 0 && uid != int64(me) && uid != socketDirOwner(c) {
		return fmt.Errorf("%s is served by %s, neither root nor this user (uid %d): nothing is sent to it — another local user may hold the address while the agent is down, or the agent listens elsewhere (its own socket: unix:/var/lib/agentd/api.sock)", name(c), Holder{UID: uid, PID: pid()}, me)
	}
	return nil
}

// socketDirOwner is the owner of a unix socket's directory when nobody else may write there
// (-1 otherwise): only that user (or root) can have put a socket in it — an agent running as
// its own user, in its data directory. Only a connection DialUnix made knows that directory:
// the name a peer reports is whatever it passed to bind (a relative one names a directory
// of the client's), so it proves nothing. A TCP port has no such place.
func socketDirOwner(c net.Conn) int64 {
	if d, ok := c.(*Conn); ok {
		return d.dirOwner // read through the descriptor it was dialled by (dialunix.go)
	}
	return -1
}

var errRemote = errors.New("the peer is on another host")

func name(c net.Conn) string {
	if d, ok := c.(*Conn); ok {
		return "unix:" + d.Path
	}
	if u, ok := c.RemoteAddr().(*net.UnixAddr); ok {
		return "unix:" + u.Name
	}
	return c.RemoteAddr().String()
}

// serverOf is the user holding the other end of c, and how to find its process (a walk of
// every process's descriptors: only to name a server that is refused).
func serverOf(c net.Conn) (uid int64, pid func() int, err error) {
	if d, ok := c.(*Conn); ok {
		c = d.UnixConn
	}
	switch c := c.(type) {
	case *net.UnixConn:
		h, err := UnixPeer(c)
		return h.UID, func() int { return h.PID }, err
	case *net.TCPConn:
		local, remote := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
		if !onThisHost(remote.IP) {
			return -1, nil, errRemote
		}
		// The server's end of this connection: an accepted one (or one waiting to be) carries
		// the listener's user.
		s, err := TCP(remote, local)
		if err != nil {
			return -1, nil, err
		}
		if s.Inode == 0 {
			// No process holds the server's end yet: sock_diag reports a request socket (a
			// listener with TCP_DEFER_ACCEPT keeps one until the client writes) and a closed
			// one as uid 0, so its uid says nothing. The listener that will accept it decides.
			l, err := Listening(remote)
			if err != nil {
				return -1, nil, fmt.Errorf("the server's end of %s → %s is held by no process yet: %w", local, remote, err)
			}
			s.UID = l.UID
		}
		return s.UID, func() int {
			if p := processOf(s.Inode); p != 0 {
				return p
			}
			// Not accepted yet: the listener's process.
			if l, err := Listening(remote); err == nil && l.UID == s.UID {
				return processOf(l.Inode)
			}
			return 0
		}, nil
	}
	return -1, nil, fmt.Errorf("a %T is neither TCP nor a unix socket", c)
}

// onThisHost reports whether ip is loopback or an address of one of this host's interfaces.
func onThisHost(ip net.IP) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // unknown: checked as local, so a failure refuses rather than sends
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// UnixPeer is who holds the other end of a unix socket connection (SO_PEERCRED: for a
// client, the process that called listen, as it was then).
func UnixPeer(c *net.UnixConn) (Holder, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Holder{UID: -1}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return Holder{UID: -1}, err
	}
	if credErr != nil {
		return Holder{UID: -1}, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return Holder{UID: int64(cred.Uid), PID: int(cred.Pid)}, nil
}
