package sockowner_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The rig of the tests below: other users' sockets, held by child processes (this test
// binary, re-run as a holder) so that no process needs more descriptors than its limit.

const holdEnv = "SOCKOWNER_TEST_HOLD" // "uid:n[:path]": hold n sockets as uid (and a unix listener at path)

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		if err := hold(spec); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hold runs in a child: becomes the user, makes n/2 loopback connections to a listener of its
// own (n sockets, both ends), prints the listener's address and waits for stdin to close.
func hold(spec string) error {
	uidText, rest, _ := strings.Cut(spec, ":")
	nText, path, _ := strings.Cut(rest, ":")
	uid, _ := strconv.Atoi(uidText)
	n, _ := strconv.Atoi(nText)
	if uid != os.Geteuid() {
		if err := syscall.Setgid(uid); err != nil {
			return err
		}
		if err := syscall.Setuid(uid); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if path != "" {
		at := path
		if len(path) >= 108 { // longer than a socket address holds: bound by its name in its directory
			if err := os.Chdir(filepath.Dir(path)); err != nil {
				return err
			}
			at = filepath.Base(path)
		}
		if _, err := net.Listen("unix", at); err != nil {
			return err
		}
	}
	var held []net.Conn
	for range n / 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return fmt.Errorf("after %d sockets: %w", len(held), err)
		}
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		held = append(held, c, s)
	}
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// holder is one child holding sockets.
type holder struct {
	cmd    *exec.Cmd
	listen *net.TCPAddr // its listener
}

// holdSockets starts children holding n sockets in all as uid (each within this process's
// descriptor limit, less a margin), and stops them when the test ends.
func holdSockets(tb testing.TB, uid, n int) []holder { return holdSocketsAt(tb, uid, n, "") }

// holdSocketsAt is holdSockets whose first holder also listens on the unix socket path.
func holdSocketsAt(tb testing.TB, uid, n int, path string) []holder {
	tb.Helper()
	if uid != os.Geteuid() && os.Geteuid() != 0 {
		tb.Skip("needs root: holds sockets as another user")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	each := int(min(lim.Max, 1<<20)) - 200
	var out []holder
	for n > 0 {
		k := min(n, each) &^ 1
		n -= max(k, 2)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%d:%s", holdEnv, uid, k, path))
		path = ""
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
		line := make(chan string, 1)
		go func() { s, _ := bufio.NewReader(stdout).ReadString('\n'); line <- strings.TrimSpace(s) }()
		select {
		case s := <-line:
			addr, err := net.ResolveTCPAddr("tcp", s)
			if err != nil {
				tb.Fatalf("holder of %d sockets: %q", k, s)
			}
			out = append(out, holder{cmd: cmd, listen: addr})
		case <-time.After(2 * time.Minute):
			tb.Fatalf("holder of %d sockets not ready within 2 minutes", k)
		}
	}
	return out
}
