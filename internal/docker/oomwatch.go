package docker

// OOM kills read from the kernel, not only from the engine's flag (issue 46): Podman neither
// sets OOMKilled nor emits an oom event here, and an engine's flag is only as good as its own
// watcher. The runtime removes a container's cgroup when its process ends, before any die
// event, so the counter cannot be read at the exit: while a container under a memory limit
// runs, the agent waits on the kernel's OOM notification of its memory cgroup (cgroup v1:
// an eventfd on memory.oom_control through cgroup.event_control), which comes as the kernel's
// OOM killer takes the cgroup on. An exit of a container so notified is an OOM kill (inspect).
// The notification also comes when the cgroup goes; its oom_control then cannot be read and
// nothing is concluded. On cgroup v2, or where the cgroup is not visible (an agent in
// a cgroup namespace of its own), no watcher runs and the engine's word stands alone.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// oomKills holds the containers the kernel's counter showed OOM-killed, and the ones watched.
type oomKills struct {
	mu      sync.Mutex
	killed  map[string]bool
	watched map[string]bool
}

func (o *oomKills) seen(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.killed[id]
}

// knows says whether the kernel's word on the container was heard: its cgroup was watched.
func (o *oomKills) knows(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.watched[id]
}

// forget drops a removed container.
func (o *oomKills) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.killed, id)
	delete(o.watched, id)
}

// watchOOM starts waiting on the memory cgroup of the container's process pid (0: not
// running). Best effort: where the cgroup cannot be watched, nothing is.
func (e *Engine) watchOOM(id string, pid int) {
	o := &e.oom
	o.mu.Lock()
	if o.watched[id] || pid <= 0 {
		o.mu.Unlock()
		return
	}
	if o.watched == nil {
		o.watched, o.killed = map[string]bool{}, map[string]bool{}
	}
	o.watched[id] = true
	o.mu.Unlock()
	dir, err := memoryCgroupV1("/proc", "/sys/fs/cgroup/memory", pid)
	if err == nil {
		err = awaitOOM(dir, func() {
			o.mu.Lock()
			o.killed[id] = true
			o.mu.Unlock()
		})
	}
	if err != nil {
		o.mu.Lock()
		delete(o.watched, id)
		o.mu.Unlock()
	}
}

// memoryCgroupV1 is the directory of the memory cgroup (v1) of process pid, beneath the
// hierarchy mounted at root.
func memoryCgroupV1(proc, root string, pid int) (string, error) {
	f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			dir := filepath.Join(root, filepath.Clean("/"+parts[2]))
			if _, err := os.Stat(filepath.Join(dir, "memory.oom_control")); err != nil {
				return "", err
			}
			return dir, nil
		}
	}
	return "", fmt.Errorf("process %d: no memory cgroup (v1)", pid)
}

// awaitOOM registers for the OOM notification of the cgroup at dir and, in a goroutine, calls
// killed once when the kernel's OOM killer takes the cgroup on.
func awaitOOM(dir string, killed func()) error {
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return err
	}
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		unix.Close(efd)
		return err
	}
	reg := fmt.Sprintf("%d %d", efd, ctl.Fd())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(reg), 0); err != nil {
		ctl.Close()
		unix.Close(efd)
		return fmt.Errorf("oom notification of %s: %w", dir, err)
	}
	go func() {
		defer unix.Close(efd)
		defer ctl.Close()
		buf := make([]byte, 8)
		for {
			if _, err := unix.Read(efd, buf); err != nil && err != unix.EINTR {
				return
			}
			// The kernel notifies as it enters the OOM killer, before the kill is counted:
			// a notification while the cgroup is there is the OOM, whatever the count says
			// yet (the other notification is of the cgroup's removal).
			if _, err := os.ReadFile(filepath.Join(dir, "memory.oom_control")); err != nil {
				return
			}
			killed()
			return
		}
	}()
	return nil
}

// podmanInit makes Podman create the container's process without starting it (libpod's
// init), so its cgroup exists and is watched before the process runs: one that goes over its
// limit at once would otherwise be killed before the watch. Docker has no such step; there the
// watch starts after the start, and the engine's own flag covers what it misses.
func (e *Engine) podmanInit(ctx context.Context, id string) error {
	p, ok := strings.CutPrefix(e.host, "unix://")
	if !ok {
		return fmt.Errorf("init %s: libpod's init is reached over a unix socket only", id)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", p)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://podman/v4.0.0/libpod/containers/"+url.PathEscape(id)+"/init", nil)
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("init %s: %w", id, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent && res.StatusCode != http.StatusNotModified {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("init %s: %s: %s", id, res.Status, b)
	}
	return nil
}
