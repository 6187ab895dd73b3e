package introspect

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/agentd/agentd/internal/sockowner"
)

// On a loopback listener every connection knows the local user that opened it: the owner of
// the client's socket, as the kernel's socket diagnostics tell it (SO_PEERCRED tells it for a
// unix socket).
// Root and the agent's own user are trusted, with the Agentd-Client header (access.go); every
// other user may hold at most maxConnsPerUser connections at once — one more is answered 503
// and closed — so no user can take the API's connections or the agent's file descriptors.

// connKey carries a request's connection in its context (Server's ConnContext).
type connKey struct{}

// ownedListener counts the open connections of each untrusted owner.
type ownedListener struct {
	net.Listener
	mu   sync.Mutex
	open map[int64]int // owner uid (-1: unknown) → connections open
}

func newOwnedListener(ln net.Listener) *ownedListener {
	return &ownedListener{Listener: ln, open: map[int64]int{}}
}

// Accept hands the connection on at once: its owner is looked up on its first read, in the
// connection's own goroutine, so a flood of connections never holds up the accept loop.
func (l *ownedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &ownedConn{Conn: c, l: l}, nil
}

// ownedConn is a connection whose owner is looked up once, before its first request is read.
type ownedConn struct {
	net.Conn
	l       *ownedListener
	once    sync.Once
	uid     int64 // -1: unknown (not trusted)
	refused bool  // over its owner's bound: answered 503, never read
	said    bool  // the 503 is written (reads come from one goroutine until the first request)
	counted bool  // holds one of its owner's connections (guarded by l.mu)
	closed  bool  // guarded by l.mu
}

// tooManyConns is what a connection over its owner's bound gets instead of an answer.
const tooManyConns = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" +
	`{"error": "too many connections of this user at once (at most 32 for a user without credentials); close some"}` + "\n"

func (c *ownedConn) resolve() {
	uid, err := socketOwner(c.Conn)
	if err != nil {
		uid = -1
	}
	c.uid = uid
	if c.trustedUID() {
		return
	}
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.closed {
		return
	}
	if c.l.open[uid] >= maxConnsPerUser {
		c.refused = true
		return
	}
	c.l.open[uid]++
	c.counted = true
}

func (c *ownedConn) trustedUID() bool {
	return c.uid == 0 || (c.uid > 0 && c.uid == int64(os.Geteuid()))
}

// trusted reports whether root or the agent's user owns the client's socket.
func (c *ownedConn) trusted() bool {
	c.once.Do(c.resolve)
	return c.trustedUID()
}

func (c *ownedConn) Read(p []byte) (int, error) {
	c.once.Do(c.resolve)
	if c.refused {
		if !c.said {
			c.said = true
			_, _ = c.Conn.Write([]byte(tooManyConns))
		}
		return 0, io.EOF // the server closes it without a word of its own
	}
	return c.Conn.Read(p)
}

func (c *ownedConn) Close() error {
	c.l.mu.Lock()
	if !c.closed && c.counted {
		if c.l.open[c.uid]--; c.l.open[c.uid] == 0 {
			delete(c.l.open, c.uid)
		}
	}
	c.closed = true
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// socketOwner finds the user owning the client's end of a loopback TCP connection: the
// socket whose own address is the connection's remote one and whose peer is its local one
// (sockowner: one exact lookup, however many sockets other users hold).
func socketOwner(c net.Conn) (int64, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, fmt.Errorf("not a TCP connection: %s", c.RemoteAddr())
	}
	s, err := sockowner.TCP(remote, local)
	if err != nil {
		return -1, err
	}
	if s.Inode == 0 {
		// A socket its process has closed: the kernel reports it as uid 0. Whoever sent the
		// request is gone, so there is nobody to trust.
		return -1, fmt.Errorf("the client's socket %s is closed", remote)
	}
	return s.UID, nil
}
