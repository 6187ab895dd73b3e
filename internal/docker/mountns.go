package docker

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/runtime"
)

// nsFix is what an operator does about a private namespace under the shipped unit.
const nsFix = "under systemd, install deploy/agentd-bind-roots.conf as " +
	"/etc/systemd/system/agentd.service.d/bind-roots.conf (it turns off the hardening options " +
	"that give the unit a mount namespace of its own), then systemctl daemon-reload && systemctl restart agentd"

// CheckHostNamespaces refuses bind roots to an agent the Docker Engine cannot follow: the
// engine mounts a bind source through /proc/<agent pid>/fd/<n> (engine_binds.go), which
// names the opened directory only if the agent shares the host's mount namespace (a mount of
// another namespace cannot be bound: every container's start would fail) and its pid
// namespace (else the engine would read another process's descriptor). The reference is
// pid 1's namespace; where /proc/1/ns/mnt cannot be read (without CAP_SYS_PTRACE, as under
// the shipped unit), the id of the mount at "/" in /proc/1/mountinfo, which every process may
// read: mount ids are unique across namespaces, so the same root mount means the same
// namespace.
func CheckHostNamespaces() error { return checkNamespaces("/proc") }

func checkNamespaces(proc string) error {
	if err := sameMountNamespace(proc, "1", "pid 1"); err != nil {
		return err
	}
	// A nested pid namespace shows as more than one pid on NSpid.
	status, err := os.ReadFile(filepath.Join(proc, "self/status"))
	if err != nil {
		return fmt.Errorf("--allow-bind-root: cannot read this process's pid namespaces: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok && len(strings.Fields(rest)) > 1 {
			return fmt.Errorf("--allow-bind-root needs agentd in the host's pid namespace (the Docker Engine reads /proc/<agent pid>/fd): this process has pids %s", strings.Join(strings.Fields(rest), ", "))
		}
	}
	return nil
}

// sameMountNamespace says whether this process shares the mount namespace of pid (who names
// it in errors): by the namespace links where both can be read, else by the root mount's id.
func sameMountNamespace(proc, pid, who string) error {
	mine, err := os.Readlink(filepath.Join(proc, "self/ns/mnt"))
	if err != nil {
		return fmt.Errorf("--allow-bind-root: cannot read this process's mount namespace: %w", err)
	}
	if theirs, err := os.Readlink(filepath.Join(proc, pid, "ns/mnt")); err == nil {
		if theirs != mine {
			return fmt.Errorf("--allow-bind-root needs agentd in the host's mount namespace (the Docker Engine mounts bind sources through this process's descriptors): this process is in %s, %s in %s; %s", mine, who, theirs, nsFix)
		}
		return nil
	}
	theirRoot, terr := rootMountID(filepath.Join(proc, pid, "mountinfo"))
	myRoot, merr := rootMountID(filepath.Join(proc, "self/mountinfo"))
	switch {
	case terr != nil || merr != nil:
		return fmt.Errorf("--allow-bind-root: cannot tell whether agentd shares the mount namespace of %s: %s unreadable, and the mount tables: %v %v", who, filepath.Join(proc, pid, "ns/mnt"), terr, merr)
	case theirRoot != myRoot:
		return fmt.Errorf("--allow-bind-root needs agentd in the host's mount namespace (the Docker Engine mounts bind sources through this process's descriptors): its root is mount %s, that of %s is mount %s; %s", myRoot, who, theirRoot, nsFix)
	}
	return nil
}

// checkSocketPeer checks the process serving the engine's unix socket (dockerd, or the init
// that holds the socket for it) against this one: the kernel reports its pid as seen from
// here, 0 when it lives outside this pid namespace — agentd is then in a pid namespace of its
// own (a container), and the engine would read /proc/<pid>/fd of another process — and it
// must share this mount namespace. A socket that cannot be reached is ErrUnavailable.
func checkSocketPeer(proc, socket string) error {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("--allow-bind-root: the Docker Engine's socket %s: %w: %v", socket, runtime.ErrUnavailable, err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return fmt.Errorf("--allow-bind-root: the Docker Engine's socket %s: %w", socket, err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		cerr = err
	}
	if cerr != nil {
		return fmt.Errorf("--allow-bind-root: who serves the Docker Engine's socket %s: %w", socket, cerr)
	}
	if cred.Pid == 0 {
		return fmt.Errorf("--allow-bind-root needs agentd in the Docker Engine's pid namespace (the engine reads /proc/<agent pid>/fd): the process serving %s is outside this one (is agentd in a container?)", socket)
	}
	return sameMountNamespace(proc, strconv.Itoa(int(cred.Pid)), fmt.Sprintf("the process serving %s (pid %d)", socket, cred.Pid))
}

// rootMountID is the id of the mount at "/" in a mountinfo file (the last one: an overmount
// is what a lookup sees).
func rootMountID(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	id := ""
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[4] == "/" {
			id = f[0]
		}
	}
	if id == "" {
		return "", fmt.Errorf("%s: no mount at /", file)
	}
	return id, nil
}
