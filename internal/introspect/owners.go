package introspect

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// On a loopback listener every connection knows the local user that opened it: the owner of
// the client's socket in the kernel's socket table, as SO_PEERCRED tells for a unix socket.
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

// socketOwner finds the user owning the client's end of a loopback TCP connection in the
// kernel's socket table (/proc/net/tcp, or tcp6): the line whose local address is the
// connection's remote one and whose remote address is the connection's local one.
func socketOwner(c net.Conn) (int64, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, fmt.Errorf("not a TCP connection: %s", c.RemoteAddr())
	}
	return owners.lookup(remote, local)
}

// ownerReadEvery is the least time between two reads of the kernel's socket table.
const ownerReadEvery = 50 * time.Millisecond

// owners answers the lookups of all listeners.
var owners = &ownerTable{}

// ownerTable answers lookups in batches: one read of the kernel's table answers every lookup
// waiting at that moment, and reads are at least ownerReadEvery apart. The kernel writes out
// every socket of the host for each read (15-20 ms for 4 000 sockets on a shared host), so a
// read per connection would let a flood of connections buy the agent's processors; this way
// lookups cost at most one read each ownerReadEvery, however many connections arrive. Only
// the matching line is parsed: the addresses are compared as the table writes them.
type ownerTable struct {
	mu      sync.Mutex
	waiting []*ownerQuery
	running bool
	last    time.Time
	reads   int // table reads so far (tests)
}

type ownerQuery struct {
	table  string // /proc/net/tcp or tcp6
	key    string // the client's address and the listener's, as the table writes them
	remote *net.TCPAddr
	uid    int64
	err    error
	done   chan struct{}
}

func (t *ownerTable) lookup(remote, local *net.TCPAddr) (int64, error) {
	// One table: a loopback listener is never dual-stack, so an IPv4 client is in tcp, an IPv6
	// one in tcp6.
	q := &ownerQuery{table: "/proc/net/tcp", key: procAddr(remote) + " " + procAddr(local), remote: remote, done: make(chan struct{})}
	if remote.IP.To4() == nil {
		q.table = "/proc/net/tcp6"
	}
	t.mu.Lock()
	t.waiting = append(t.waiting, q)
	if !t.running {
		t.running = true
		go t.run()
	}
	t.mu.Unlock()
	<-q.done
	return q.uid, q.err
}

// run reads the table for the waiting lookups until none is left.
func (t *ownerTable) run() {
	for {
		t.mu.Lock()
		pause := time.Until(t.last.Add(ownerReadEvery))
		t.mu.Unlock()
		if pause > 0 {
			time.Sleep(pause) // lookups arriving meanwhile join this batch
		}
		t.mu.Lock()
		batch := t.waiting
		t.waiting = nil
		if len(batch) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		t.last = time.Now()
		t.reads++
		t.mu.Unlock()
		byTable := map[string]map[string][]*ownerQuery{}
		for _, q := range batch {
			if byTable[q.table] == nil {
				byTable[q.table] = map[string][]*ownerQuery{}
			}
			byTable[q.table][q.key] = append(byTable[q.table][q.key], q)
			q.err = fmt.Errorf("the client's socket %s is not in %s", q.remote, q.table)
		}
		for table, queries := range byTable {
			if err := readOwners(table, queries); err != nil {
				for _, qs := range queries {
					for _, q := range qs {
						q.err = err
					}
				}
			}
		}
		for _, q := range batch {
			if q.err != nil {
				q.uid = -1
			}
			close(q.done)
		}
	}
}

// readOwners reads one table and answers the queries whose line it finds.
func readOwners(table string, queries map[string][]*ownerQuery) error {
	f, err := os.Open(table)
	if err != nil {
		return err
	}
	defer f.Close()
	var keyLen int
	for k := range queries {
		keyLen = len(k) // every key of one table has the same length
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "  sl: local remote st tx:rx tr:when retrnsmt uid timeout inode …"
		line := sc.Text()
		i := strings.Index(line, ": ")
		if i < 0 || len(line) < i+2+keyLen {
			continue // the header
		}
		qs := queries[line[i+2:i+2+keyLen]]
		if qs == nil {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 10 {
			return fmt.Errorf("%s: a line too short: %q", table, line)
		}
		uid, err1 := strconv.ParseInt(fields[7], 10, 64)
		inode, err2 := strconv.ParseUint(fields[9], 10, 64)
		for _, q := range qs {
			switch {
			case err1 != nil || err2 != nil:
				q.err = fmt.Errorf("%s: uid %q, inode %q: not numbers", table, fields[7], fields[9])
			case inode == 0:
				// A socket its process has closed: the kernel lists it as uid 0. Whoever sent
				// the request is gone, so there is nobody to trust.
				q.err = fmt.Errorf("the client's socket %s is closed", q.remote)
			default:
				q.uid, q.err = uid, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", table, err)
	}
	return nil
}

// procAddr writes an address as /proc/net/tcp does: the IP as 32-bit words in the host's byte
// order, each as 8 upper-case hex digits, then the port as 4.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}
