package sockowner_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sockowner"
)

// pair is a loopback connection, both ends held by this process.
func pair(t testing.TB, network, addr string) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("%s %s: %v", network, addr, err)
	}
	defer ln.Close()
	if client, err = net.Dial(network, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if server, err = ln.Accept(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func tcp(a net.Addr) *net.TCPAddr { return a.(*net.TCPAddr) }

// TestLookupsFindTheExactSocket: a client's socket is found by its own address and its
// peer's, over IPv4 and IPv6 loopback, through netlink and through the table the same; a
// listener by its address alone; a 4-tuple nobody holds is ErrNotFound.
func TestLookupsFindTheExactSocket(t *testing.T) {
	for _, via := range []struct {
		name string
		diag bool
	}{{"sock_diag", true}, {"proc_table", false}} {
		t.Run(via.name, func(t *testing.T) {
			defer sockowner.SetUseDiag(via.diag)()
			for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
				client, server := pair(t, "tcp", addr)
				s, err := sockowner.TCP(tcp(server.RemoteAddr()), tcp(server.LocalAddr()))
				if err != nil || s.UID != int64(os.Geteuid()) || s.Inode == 0 {
					t.Errorf("%s: the client's socket: %+v, %v; want uid %d and an inode", addr, s, err, os.Geteuid())
				}
				if _, err := sockowner.Listening(tcp(client.LocalAddr())); !errors.Is(err, sockowner.ErrNotFound) {
					t.Errorf("%s: a listener on the client's address: %v; want ErrNotFound", addr, err)
				}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			h, err := sockowner.ListenerHolder(tcp(ln.Addr()))
			if err != nil || h.UID != int64(os.Geteuid()) || h.PID != os.Getpid() {
				t.Errorf("the holder of this process's listener: %v, %v; want pid %d (uid %d)", h, err, os.Getpid(), os.Geteuid())
			}
		})
	}
}

// TestAnotherUsersSocketsCostNoTableRead: with sockets held by uid 65534, each lookup is one
// netlink question — the whole table is never read (the agent's cost per connection does not
// grow with what other users hold) — and the other user's listener is named by its pid and
// uid.
func TestAnotherUsersSocketsCostNoTableRead(t *testing.T) {
	held := holdSockets(t, 65534, heldCount(t, 4000))
	client, server := pair(t, "tcp", "127.0.0.1:0")
	reads, diags := sockowner.TableReads(), sockowner.Diags()
	const lookups = 200
	for range lookups {
		s, err := sockowner.TCP(tcp(server.RemoteAddr()), tcp(server.LocalAddr()))
		if err != nil || s.UID != int64(os.Geteuid()) {
			t.Fatalf("this test's socket: %+v, %v", s, err)
		}
	}
	if got := sockowner.TableReads() - reads; got != 0 {
		t.Errorf("%d reads of the whole socket table for %d lookups; want none", got, lookups)
	}
	if got := sockowner.Diags() - diags; got != lookups {
		t.Errorf("%d netlink lookups for %d; want one each", got, lookups)
	}
	h, err := sockowner.ListenerHolder(held[0].listen)
	if err != nil || h.UID != 65534 || h.PID != held[0].cmd.Process.Pid {
		t.Errorf("the other user's listener %s: held by %v, %v; want pid %d (uid 65534)", held[0].listen, h, err, held[0].cmd.Process.Pid)
	}
	_ = client
}

// heldCount is n, or AGENTD_HELD_SOCKETS when set (the figure is 72000).
func heldCount(tb testing.TB, n int) int {
	if s := os.Getenv("AGENTD_HELD_SOCKETS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			tb.Fatalf("AGENTD_HELD_SOCKETS=%q: want a count", s)
		}
		return v
	}
	return n
}

// TestTableLookupsShareReads: where netlink is refused, 100 lookups arriving at once are
// each answered (this test's user), with reads of the kernel's table at least
// TableReadEvery apart — a flood of connections costs one read per period, not one each.
func TestTableLookupsShareReads(t *testing.T) {
	defer sockowner.SetUseDiag(false)()
	const n = 100
	var servers []net.Conn
	for range n {
		_, s := pair(t, "tcp", "127.0.0.1:0")
		servers = append(servers, s)
	}
	before := sockowner.TableReads()
	start := time.Now()
	var wg sync.WaitGroup
	socks := make([]sockowner.Socket, n)
	errs := make([]error, n)
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			socks[i], errs[i] = sockowner.TCP(tcp(s.RemoteAddr()), tcp(s.LocalAddr()))
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	reads := sockowner.TableReads() - before
	for i := range n {
		if errs[i] != nil || socks[i].UID != int64(os.Geteuid()) {
			t.Fatalf("connection %d: %+v, %v; want uid %d", i, socks[i], errs[i], os.Geteuid())
		}
	}
	if limit := int(elapsed/sockowner.TableReadEvery) + 1; reads > limit || reads < 1 {
		t.Fatalf("%d table reads for %d lookups in %v; want 1 to %d (one per %v at most)", reads, n, elapsed, limit, sockowner.TableReadEvery)
	}
}

// BenchmarkLookup: one owner lookup with AGENTD_HELD_SOCKETS (default none) held by uid
// 65534, through netlink, beside one read of the whole table (the fallback's cost).
//
//	AGENTD_HELD_SOCKETS=72000 go test -run '^$' -bench Lookup -benchtime 200x ./internal/sockowner
func BenchmarkLookup(b *testing.B) {
	if n := heldCount(b, 0); n > 0 {
		holdSockets(b, 65534, n)
	}
	_, server := pair(b, "tcp", "127.0.0.1:0")
	b.Run("sock_diag", func(b *testing.B) {
		for b.Loop() {
			if _, err := sockowner.TCP(tcp(server.RemoteAddr()), tcp(server.LocalAddr())); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proc_table", func(b *testing.B) {
		for b.Loop() {
			if err := sockowner.ReadWholeTable(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestOnlyRootOrThisUserServes: a connection to a listener of this process's user (TCP over
// IPv4 and IPv6, a unix socket) passes; one to uid 65534's listener is refused naming the
// address, its pid and its uid — before anything is written — unless it is a unix socket in a
// directory only uid 65534 may write (an agent running as its own user).
func TestOnlyRootOrThisUserServes(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		client, _ := pair(t, "tcp", addr)
		if err := sockowner.CheckServer(client); err != nil {
			t.Errorf("this user's listener on %s: %v", addr, err)
		}
	}
	client, _ := pair(t, "unix", filepath.Join(t.TempDir(), "s"))
	if err := sockowner.CheckServer(client); err != nil {
		t.Errorf("this user's unix socket: %v", err)
	}
	// A unix socket of uid 65534: refused in a directory others may write (/tmp-like), served
	// as an agent of its own user in a directory only that user writes.
	base, err := os.MkdirTemp("", "sockowner-") // not t.TempDir: uid 65534 must pass through
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	shared, private := filepath.Join(base, "shared"), filepath.Join(base, "private")
	for dir, mode := range map[string]os.FileMode{shared: 0o1777, private: 0o700} {
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Skipf("needs root: %v", err)
		}
	}
	holdSocketsAt(t, 65534, 2, filepath.Join(shared, "s"))
	holdSocketsAt(t, 65534, 2, filepath.Join(private, "s"))
	for dir, refused := range map[string]bool{shared: true, private: false} {
		c, err := sockowner.DialUnix(context.Background(), filepath.Join(dir, "s"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := sockowner.CheckServer(c); (err != nil) != refused || refused && !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("uid 65534's socket in %s: %v; refused: %v", dir, err, refused)
		}
	}
	held := holdSockets(t, 65534, 2)
	c, err := net.Dial("tcp", held[0].listen.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := fmt.Sprintf("%s is served by pid %d (uid 65534)", held[0].listen, held[0].cmd.Process.Pid)
	if err := sockowner.CheckServer(c); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("uid 65534's listener: %v; want a refusal saying %q", err, want)
	}
}
