package introspect_test

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/introspect"
)

// attackerEnv makes this test binary a local user's connect loop (TestSocketAttacker).
const attackerEnv = "AGENTD_TEST_SOCKET_ATTACKER"

// TestSocketAttacker is not a test: run with attackerEnv=PATH (as another user), it tries to
// connect to PATH as fast as it can and prints "connected" the first time it does, for 60 s
// at most.
func TestSocketAttacker(t *testing.T) {
	path := os.Getenv(attackerEnv)
	if path == "" {
		t.Skip("the attacker of TestUnixSocketIsNeverOpenToOthers, run by it")
	}
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			os.Stdout.WriteString("connected\n")
			return
		}
	}
}

// TestUnixSocketIsNeverOpenToOthers: the API's unix socket is 0600 from the moment its name
// appears, whatever the agent's umask. Before, it was bound at its path with the umask's mode
// and chmod-ed after: under umask 0 (a careless unit or shell), uid 65534 looping on connect
// got in, in about one start of ten, and kept a connection with the unix socket's full access
// (journal export, logs) for as long as it liked. os.Chmod/os.Chown also followed a link
// swapped in at the path.
func TestUnixSocketIsNeverOpenToOthers(t *testing.T) {
	needSetpriv(t)
	dir, err := os.MkdirTemp("", "agentd-socket-race-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary, where uid 65534 may run it.
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "attacker")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestSocketAttacker$")
	cmd.Env = append(os.Environ(), attackerEnv+"="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	won := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "connected") {
				close(won)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	time.Sleep(200 * time.Millisecond) // the attacker's loop is running (a head start only: the test holds without it)

	old := syscall.Umask(0)
	defer syscall.Umask(old)
	api, err := introspect.Guard(introspect.Options{Listen: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		ln, err := api.Listen()
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		st, err := os.Lstat(sock)
		if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
			t.Fatalf("start %d: the socket is %v (%v); want a socket of mode 0600", i, st.Mode(), err)
		}
		ln.Close()
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Fatalf("start %d: the socket is left after the listener closed (%v)", i, err)
		}
		select {
		case <-won:
			t.Fatalf("uid 65534 connected to the API's socket while it was being made (start %d of 200, umask 0)", i)
		default:
		}
	}
	select {
	case <-won:
		t.Fatal("uid 65534 connected to the API's socket while it was being made (umask 0)")
	default:
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left in the socket's directory: %v; want only the test's attacker", ents)
	}
}

// TestLongUnixSocketPathStillListens: a socket path near the 107 bytes an address holds still
// listens, though the private directory it is made in lengthens it, and the listener names it.
func TestLongUnixSocketPathStillListens(t *testing.T) {
	base, err := os.MkdirTemp("", "agentd-long-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	sock := filepath.Join(base, "api.sock")
	if pad := 100 - len(sock) - 1; pad > 0 {
		dir := filepath.Join(base, strings.Repeat("d", pad))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sock = filepath.Join(dir, "api.sock")
	}
	api, err := introspect.Guard(introspect.Options{Listen: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := api.Listen()
	if err != nil {
		t.Fatalf("a %d-byte socket path: %v", len(sock), err)
	}
	if ln.Addr().String() != sock {
		t.Errorf("listener address %s; want %s", ln.Addr(), sock)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	c.Close()
	ln.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left after close: %v", err)
	}
}
