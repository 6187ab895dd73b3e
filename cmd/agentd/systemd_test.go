package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agentd/agentd/deploy"
	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/fsm"
)

// fakeSystemd is a unixgram socket standing in for systemd's $NOTIFY_SOCKET.
func fakeSystemd(t *testing.T) <-chan string {
	t.Helper()
	// A short path: unix socket names are limited to 108 bytes, and t.TempDir can be long.
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	msgs := make(chan string, 1024)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	return msgs
}

// next returns the next notification, or fails after within.
func next(t *testing.T, msgs <-chan string, within time.Duration, what string) string {
	t.Helper()
	select {
	case m, ok := <-msgs:
		if !ok {
			t.Fatalf("the notify socket closed while waiting for %s", what)
		}
		return m
	case <-time.After(within):
		t.Fatalf("no %s within %v", what, within)
	}
	return ""
}

// TestSystemdReadinessAndWatchdog runs the daemon in-process under a stand-in for systemd:
// READY=1 comes only when /healthz already answers 200 (recovery finished, the loop answers)
// and before any watchdog ping; WATCHDOG=1 pings come while the loop answers, stop while the
// loop is wedged (a query that blocks it), and resume when it is free; STOPPING=1 on stop.
func TestSystemdReadinessAndWatchdog(t *testing.T) {
	msgs := fakeSystemd(t)
	// Pings come every third of this; a query slower than that (a loaded machine) counts as
	// a wedged loop, so it is not made shorter.
	const watchdog = 600 * time.Millisecond
	t.Setenv("WATCHDOG_USEC", "600000")
	cp := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	defer cp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := startAgent(ctx, agentConfig{DataDir: t.TempDir(), Backend: cp.URL, AgentID: "agent-sd", Runtime: "sim",
		Listen: "127.0.0.1:0", CleanupWait: time.Hour}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- a.wait(ctx) }()
	api := "http://" + a.listen

	first := next(t, msgs, 10*time.Second, "READY=1")
	if !strings.HasPrefix(first, "READY=1\n") || !strings.Contains(first, "STATUS=") {
		t.Fatalf("first notification %q; want READY=1 (with a STATUS line) before anything else", first)
	}
	if code := getJSON(t, api+"/healthz", nil); code != http.StatusOK {
		t.Fatalf("READY=1 was sent while /healthz answers %d", code)
	}
	for i := 0; i < 3; i++ {
		if m := next(t, msgs, 10*time.Second, "a watchdog ping"); m != "WATCHDOG=1" {
			t.Fatalf("notification %q; want WATCHDOG=1", m)
		}
	}

	// Wedge the loop: a query that does not return holds its goroutine.
	wedged, release := make(chan struct{}), make(chan struct{})
	go func() { _ = a.eng.Query(ctx, func(*fsm.State) { close(wedged); <-release }) }()
	<-wedged
	// A ping whose query finished just before the wedge may still arrive; after that, none.
	drain := time.After(watchdog / 3)
drained:
	for {
		select {
		case <-msgs:
		case <-drain:
			break drained
		}
	}
	select {
	case m := <-msgs:
		t.Fatalf("notification %q while the loop is wedged; want silence so systemd restarts the agent", m)
	case <-time.After(3 * watchdog):
	}
	close(release)
	if m := next(t, msgs, 10*time.Second, "a watchdog ping after the loop is free"); m != "WATCHDOG=1" {
		t.Fatalf("notification %q; want WATCHDOG=1", m)
	}

	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for {
		m := next(t, msgs, 5*time.Second, "STOPPING=1")
		if m == "STOPPING=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", m)
		}
	}
}

// TestNoNotificationsOutsideSystemd: without $NOTIFY_SOCKET the daemon sends nothing and the
// notifier does not linger.
func TestNoNotificationsOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	cp := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	defer cp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := startAgent(ctx, agentConfig{DataDir: t.TempDir(), Backend: cp.URL, AgentID: "agent-nosd", Runtime: "sim",
		Listen: "127.0.0.1:0", CleanupWait: time.Hour}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := a.wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestUnitFileVerifies runs `systemd-analyze verify` on deploy/agentd.service, with the
// binary it names present, as systemd would on a host.
func TestUnitFileVerifies(t *testing.T) {
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian: apt-get install systemd); the unit file is not verified")
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "agentd.service")
	// The unit names /usr/local/bin/agentd; verify checks that the ExecStart binary exists,
	// so point it at the one this test built.
	text := strings.ReplaceAll(string(deploy.Unit), "/usr/local/bin/agentd", agentdBinary(t))
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, want := range []string{"Type=notify", "Restart=always", "StartLimitIntervalSec=0", "AF_NETLINK", "WatchdogSec=", "NotifyAccess=main", "After=network-online.target docker.service"} {
		if !strings.Contains(string(deploy.Unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
}

// mountNamespaceOptions are the service options that make systemd give a unit a mount
// namespace of its own (systemd's exec_needs_mount_namespace), each with the value that turns
// it off; "" marks a list option that no drop-in can empty: the unit must not use it with
// bind roots possible.
var mountNamespaceOptions = map[string]string{
	"ProtectSystem": "no", "ProtectHome": "no", "PrivateTmp": "no", "PrivateDevices": "no", "PrivateMounts": "no",
	"ProtectKernelTunables": "no", "ProtectKernelModules": "no", "ProtectKernelLogs": "no", "ProtectControlGroups": "no",
	"ProtectProc": "default", "ProcSubset": "all", "PrivateIPC": "no", "MountFlags": "shared",
	"ReadWritePaths": "", "ReadOnlyPaths": "", "InaccessiblePaths": "", "ExecPaths": "", "NoExecPaths": "",
	"BindPaths": "", "BindReadOnlyPaths": "", "TemporaryFileSystem": "", "RootDirectory": "", "RootImage": "",
	"MountImages": "", "ExtensionImages": "", "ExtensionDirectories": "", "LogNamespace": "", "IPCNamespacePath": "",
}

func unitSettings(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

// TestBindRootsDropInGivesTheHostMountNamespace: deploy/agentd-bind-roots.conf turns off every
// option of the unit that would give agentd a private mount namespace (the Docker Engine could
// not mount a bind source through agentd's descriptors: every task with a bind mount would fail
// to start) and nothing else; the unit with it passes `systemd-analyze verify`.
func TestBindRootsDropInGivesTheHostMountNamespace(t *testing.T) {
	unit, dropIn := unitSettings(string(deploy.Unit)), unitSettings(string(deploy.BindRootsDropIn))
	for k, v := range unit {
		off, ns := mountNamespaceOptions[k]
		switch {
		case !ns || v == off:
		case off == "":
			t.Errorf("the unit sets %s=%s, which gives it a mount namespace no drop-in can take away", k, v)
		case dropIn[k] != off:
			t.Errorf("the unit sets %s=%s and the drop-in does not set %s=%s", k, v, k, off)
		}
	}
	for k, v := range dropIn {
		if off, ns := mountNamespaceOptions[k]; !ns || off == "" || v != off {
			t.Errorf("the drop-in sets %s=%s: it may only turn mount namespace options off", k, v)
		}
	}
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; the drop-in is not verified")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "agentd.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(deploy.Unit), "/usr/local/bin/agentd", agentdBinary(t))
	if err := os.WriteFile(filepath.Join(dir, "agentd.service"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agentd.service.d", "bind-roots.conf"), deploy.BindRootsDropIn, 0o644); err != nil {
		t.Fatal(err)
	}
	// verify reads drop-ins beside the unit: a bad value there is reported (checked by hand).
	out, err := exec.Command(tool, "verify", filepath.Join(dir, "agentd.service")).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify with the drop-in: %v\n%s", err, out)
	}
}
