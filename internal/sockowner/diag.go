package sockowner

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The library learns the host's byte order on its first request, in a package variable it
// writes unguarded: two first lookups at once (two connections to the agent's API) raced on
// it (make test-race, introspect's IPv6 loopback test). Learnt here, before any can.
func init() { nl.NativeEndian() }

// diag asks the kernel for the one socket with these addresses: an inet_diag_req_v2 without
// NLM_F_DUMP, which the kernel answers by a lookup in its hash (inet_diag_find_one_icsk), not
// by a walk of every socket. netlink's own SocketGet (v1.3.1) sends the same request as a
// dump filtered by ports only — the kernel walks the whole table for it (20-50 ms a lookup
// with 19,000 sockets here, against 0.03-0.1 ms for this one) — so the request is built here
// and only the library's netlink transport is used.
func diag(local, remote *net.TCPAddr) (Socket, error) {
	req, err := diagRequest(local, remote)
	if err != nil {
		return Socket{}, err
	}
	r := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, 0)
	r.AddData(req)
	msgs, err := r.Execute(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY)
	diags.Add(1)
	if errors.Is(err, syscall.ENOENT) {
		return Socket{}, fmt.Errorf("%s → %s: %w", local, remote, ErrNotFound)
	}
	if err != nil {
		return Socket{}, fmt.Errorf("sock_diag %s → %s: %w", local, remote, err)
	}
	if len(msgs) != 1 || len(msgs[0]) < diagMsgLen {
		return Socket{}, fmt.Errorf("sock_diag %s → %s: %d answers; want one of %d bytes", local, remote, len(msgs), diagMsgLen)
	}
	m := msgs[0]
	return Socket{UID: int64(binary.NativeEndian.Uint32(m[64:68])), Inode: uint64(binary.NativeEndian.Uint32(m[68:72]))}, nil
}

// The kernel's structures (include/uapi/linux/inet_diag.h): inet_diag_req_v2 is family,
// protocol, ext, pad (1 byte each), states (u32), then inet_diag_sockid: source and
// destination ports (big-endian u16), source and destination addresses (4 × u32 each, an
// IPv4 address in the first), interface (u32) and cookie (2 × u32). inet_diag_msg answers
// with family, state, timer, retrans, the sockid, then expires, rqueue, wqueue, uid, inode
// (u32 each).
const (
	diagReqLen = 56
	diagMsgLen = 72
)

type diagReq []byte

func (r diagReq) Len() int          { return len(r) }
func (r diagReq) Serialize() []byte { return r }

func diagRequest(local, remote *net.TCPAddr) (diagReq, error) {
	b := make(diagReq, diagReqLen)
	l4, r4 := local.IP.To4(), remote.IP.To4()
	switch {
	case l4 != nil && r4 != nil:
		b[0] = unix.AF_INET
		copy(b[12:16], l4)
		copy(b[28:32], r4)
	case l4 == nil && r4 == nil && local.IP.To16() != nil && remote.IP.To16() != nil:
		b[0] = unix.AF_INET6
		copy(b[12:28], local.IP.To16())
		copy(b[28:44], remote.IP.To16())
	default:
		return nil, fmt.Errorf("sock_diag %s → %s: not two IPv4 or two IPv6 addresses", local, remote)
	}
	b[1] = unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:8], ^uint32(0)) // any state
	binary.BigEndian.PutUint16(b[8:10], uint16(local.Port))
	binary.BigEndian.PutUint16(b[10:12], uint16(remote.Port))
	binary.NativeEndian.PutUint32(b[48:52], ^uint32(0)) // no cookie to match
	binary.NativeEndian.PutUint32(b[52:56], ^uint32(0))
	return b, nil
}
