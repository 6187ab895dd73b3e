package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	mine, err := os.Readlink(filepath.Join(proc, "self/ns/mnt"))
	if err != nil {
		return fmt.Errorf("--allow-bind-root: cannot read this process's mount namespace: %w", err)
	}
	if host, err := os.Readlink(filepath.Join(proc, "1/ns/mnt")); err == nil {
		if host != mine {
			return fmt.Errorf("--allow-bind-root needs agentd in the host's mount namespace (the Docker Engine mounts bind sources through this process's descriptors): this process is in %s, pid 1 in %s; %s", mine, host, nsFix)
		}
	} else {
		hostRoot, herr := rootMountID(filepath.Join(proc, "1/mountinfo"))
		myRoot, merr := rootMountID(filepath.Join(proc, "self/mountinfo"))
		switch {
		case herr != nil || merr != nil:
			return fmt.Errorf("--allow-bind-root: cannot tell whether agentd shares the host's mount namespace: %s unreadable (%v), and the mount tables: %v %v", filepath.Join(proc, "1/ns/mnt"), err, herr, merr)
		case hostRoot != myRoot:
			return fmt.Errorf("--allow-bind-root needs agentd in the host's mount namespace (the Docker Engine mounts bind sources through this process's descriptors): its root is mount %s, pid 1's is mount %s; %s", myRoot, hostRoot, nsFix)
		}
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
