package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
)

// hostStatus asks addr for /v1/tasks with the Host header given.
func hostStatus(t *testing.T, addr, host string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /v1/tasks HTTP/1.1\r\nHost: %s\r\nAgentd-Client: 1\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAPIFlagsReachTheListener: the running binary answers the --api-host name and refuses a
// foreign one with 421 (DNS rebinding), and refuses to start with --api-group on TCP, naming
// the flag.
func TestAPIFlagsReachTheListener(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the agent")
	}
	t.Parallel()
	srv := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	a := startProc(t, "run", "--runtime", "sim", "--data-dir", filepath.Join(dir, "data"), "--backend", srv.URL, "--listen", "127.0.0.1:0",
		"--log-format", "json", "--api-host", "agent.internal", "--api-host", "agentd.example.lan")
	addr := a.await(t, "agent running", 30*time.Second)["listen"].(string)
	for host, want := range map[string]int{"agent.internal": 200, "agentd.example.lan:51678": 200, "localhost": 200, "attacker.example": 421, "127.0.0.1.nip.io": 421} {
		if got := hostStatus(t, addr, host); got != want {
			t.Errorf("Host %s: HTTP %d; want %d", host, got, want)
		}
	}
	out, err := exec.Command(agentdBinary(t), "run", "--runtime", "sim", "--data-dir", filepath.Join(dir, "data2"), "--backend", srv.URL,
		"--listen", "127.0.0.1:0", "--api-group", "nogroup").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--api-group") {
		t.Errorf("--api-group on TCP: %v\n%s; want a refusal naming --api-group", err, out)
	}
}

// TestClientsReachAUnixSocket: `agentd journal --live` and `agentd logs --api` take
// unix:PATH, the address a --listen unix:PATH agent (and --api-group's members) use.
func TestClientsReachAUnixSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the agent")
	}
	t.Parallel()
	srv := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	a := startProc(t, "run", "--runtime", "sim", "--data-dir", filepath.Join(dir, "data"), "--backend", srv.URL, "--listen", "unix:"+sock, "--log-format", "json")
	a.await(t, "agent running", 30*time.Second)
	copyPath := filepath.Join(dir, "copy.db")
	if out, err := exec.Command(agentdBinary(t), "journal", "export", "--live", "unix:"+sock, "--out", copyPath).CombinedOutput(); err != nil {
		t.Fatalf("journal export --live unix:: %v\n%s", err, out)
	}
	if out, err := exec.Command(agentdBinary(t), "journal", "dump", "--file", copyPath).CombinedOutput(); err != nil || !strings.Contains(string(out), "agent_started") {
		t.Fatalf("the exported copy: %v\n%s", err, out)
	}
	out, err := exec.Command(agentdBinary(t), "logs", "--api", "unix:"+sock, "task/none", "app").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "HTTP 404") || !strings.Contains(string(out), "no task task/none") {
		t.Fatalf("logs --api unix:: %v\n%s; want the agent's 404 for task/none", err, out)
	}
}
