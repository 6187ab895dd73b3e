package sockowner

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The fallback where netlink is refused: the kernel's socket table as text (/proc/net/tcp,
// tcp6). The kernel writes out every socket of the host for each read (15-20 ms for 4,000
// sockets on a shared host), so a read per lookup would let a flood of connections buy the
// agent's processors: one read answers every lookup waiting at that moment, and reads are at
// least tableReadEvery apart. Only the matching line is parsed: the addresses are compared as
// the table writes them.

// tableReadEvery is the least time between two reads of the kernel's socket table.
const tableReadEvery = 50 * time.Millisecond

// table answers the fallback lookups of the whole process.
var table = &socketTable{}

// diags counts the netlink lookups (tests: a lookup is one of these, never a table read).
var diags atomic.Int64

type socketTable struct {
	mu      sync.Mutex
	waiting []*tableQuery
	running bool
	last    time.Time
	reads   int // table reads so far (tests)
}

type tableQuery struct {
	file  string // /proc/net/tcp or tcp6
	key   string // the socket's own address and its peer's, as the table writes them
	local *net.TCPAddr
	sock  Socket
	err   error
	done  chan struct{}
}

func (t *socketTable) lookup(local, remote *net.TCPAddr) (Socket, error) {
	// One file: a loopback listener is never dual-stack, so an IPv4 socket is in tcp, an IPv6
	// one in tcp6.
	q := &tableQuery{file: "/proc/net/tcp", key: procAddr(local) + " " + procAddr(remote), local: local, done: make(chan struct{})}
	if local.IP.To4() == nil {
		q.file = "/proc/net/tcp6"
	}
	t.mu.Lock()
	t.waiting = append(t.waiting, q)
	if !t.running {
		t.running = true
		go t.run()
	}
	t.mu.Unlock()
	<-q.done
	return q.sock, q.err
}

// run reads the table for the waiting lookups until none is left.
func (t *socketTable) run() {
	for {
		t.mu.Lock()
		pause := time.Until(t.last.Add(tableReadEvery))
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
		byFile := map[string]map[string][]*tableQuery{}
		for _, q := range batch {
			if byFile[q.file] == nil {
				byFile[q.file] = map[string][]*tableQuery{}
			}
			byFile[q.file][q.key] = append(byFile[q.file][q.key], q)
			q.err = fmt.Errorf("%s: %s: %w", q.file, q.local, ErrNotFound)
		}
		for file, queries := range byFile {
			if err := readTable(file, queries); err != nil {
				for _, qs := range queries {
					for _, q := range qs {
						q.err = err
					}
				}
			}
		}
		for _, q := range batch {
			close(q.done)
		}
	}
}

// readTable reads one file and answers the queries whose line it finds.
func readTable(file string, queries map[string][]*tableQuery) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	var keyLen int
	for k := range queries {
		keyLen = len(k) // every key of one file has the same length
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
			return fmt.Errorf("%s: a line too short: %q", file, line)
		}
		uid, err1 := strconv.ParseInt(fields[7], 10, 64)
		inode, err2 := strconv.ParseUint(fields[9], 10, 64)
		for _, q := range qs {
			if err1 != nil || err2 != nil {
				q.err = fmt.Errorf("%s: uid %q, inode %q: not numbers", file, fields[7], fields[9])
			} else {
				q.sock, q.err = Socket{UID: uid, Inode: inode}, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", file, err)
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
