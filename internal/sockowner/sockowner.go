// Package sockowner finds who holds a socket of this host: the user behind the other end of a
// local connection, and the user and process behind a listener. The kernel's socket
// diagnostics (sock_diag over netlink) look up one exact 4-tuple in its hash, so a lookup
// costs the same however many sockets other users hold; reading /proc/net/tcp instead makes
// the kernel write out every socket of the host (issue 41: 72,000 sockets held by another
// user took a trusted request from 15 ms to 706 ms). The table is read only where netlink is
// refused (a seccomp filter, a unit's RestrictAddressFamilies without AF_NETLINK), in reads
// shared by every lookup waiting (table.go).
package sockowner

import (
	"errors"
	"fmt"
	"net"
)

// Socket is what the kernel says of one TCP socket.
type Socket struct {
	UID int64
	// Inode of the socket's file; 0 when no process holds it: closed by its process, or a
	// connection the listening process has not accepted yet.
	Inode uint64
}

// ErrNotFound: no socket of this host has the addresses asked for.
var ErrNotFound = errors.New("no such socket on this host")

// TCP finds the TCP socket of this host whose own address is local and whose peer is remote.
// A listener is found by its own address and a zero remote one (Listening).
func TCP(local, remote *net.TCPAddr) (Socket, error) {
	if useDiag {
		s, err := diag(local, remote)
		if err == nil || errors.Is(err, ErrNotFound) {
			return s, err
		}
	}
	return table.lookup(local, remote)
}

// useDiag is false only in tests of the fallback.
var useDiag = true

// Listening finds the listener serving addr: the socket with that own address and no peer
// (a listener on the wildcard address serves a loopback one too).
func Listening(addr *net.TCPAddr) (Socket, error) {
	zero := net.IPv4zero
	if addr.IP.To4() == nil {
		zero = net.IPv6zero
	}
	return TCP(addr, &net.TCPAddr{IP: zero})
}

// Holder is who holds a socket: its user, and its process where this process may see it (0
// otherwise: another user's descriptors are hidden from a process without CAP_SYS_PTRACE).
type Holder struct {
	UID int64
	PID int
}

func (h Holder) String() string {
	if h.PID == 0 {
		return fmt.Sprintf("uid %d (its process is not visible to this one)", h.UID)
	}
	return fmt.Sprintf("pid %d (uid %d)", h.PID, h.UID)
}

// ListenerHolder names who listens on addr.
func ListenerHolder(addr *net.TCPAddr) (Holder, error) {
	s, err := Listening(addr)
	if err != nil {
		return Holder{UID: -1}, fmt.Errorf("the listener on %s: %w", addr, err)
	}
	return Holder{UID: s.UID, PID: processOf(s.Inode)}, nil
}
