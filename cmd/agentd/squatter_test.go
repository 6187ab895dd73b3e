package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/controlplane"
	"github.com/agentd/agentd/internal/forensics"
)

// Issue 41: a local user who binds the API's port first must neither keep the agent from
// running nor receive anything of root's tools.

const squatterEnv = "AGENTD_TEST_SQUATTER" // the address a squatter child binds

// squatter is a child process (this test binary, as uid 65534) holding a TCP address and
// recording, per connection, every byte it receives.
type squatter struct {
	cmd      *exec.Cmd
	stdin    io.Closer
	addr     string
	received chan string // one line per connection: what it sent
}

// TestSquatterProcess is the squatter's body when run by startSquatter; a no-op otherwise.
func TestSquatterProcess(t *testing.T) {
	addr := os.Getenv(squatterEnv)
	if addr == "" {
		t.Skip("the squatter of TestSquattedPortNeverStopsTheAgent, run as its child")
	}
	if err := syscall.Setgid(65534); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(65534); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("listening %s\n", ln.Addr())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, _ := io.ReadAll(c)
				fmt.Printf("received %q\n", b)
			}()
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
}

// startSquatter binds addr as uid 65534 in a child and returns once it listens.
func startSquatter(t *testing.T, addr string) *squatter {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the squatter runs as uid 65534")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSquatterProcess$")
	cmd.Env = append(os.Environ(), squatterEnv+"="+addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &squatter{cmd: cmd, stdin: stdin, received: make(chan string, 64)}
	t.Cleanup(s.leave)
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				listening <- a
			} else if got, ok := strings.CutPrefix(sc.Text(), "received "); ok {
				s.received <- got
			}
		}
		close(listening)
	}()
	select {
	case a, ok := <-listening:
		if !ok {
			t.Fatal("the squatter ended before listening")
		}
		s.addr = a
	case <-time.After(30 * time.Second):
		t.Fatal("the squatter did not listen within 30 s")
	}
	return s
}

// leave ends the squatter and waits until it is gone (its port free).
func (s *squatter) leave() {
	if s.cmd.ProcessState == nil {
		s.stdin.Close()
		_ = s.cmd.Wait()
	}
}

// sentNothing waits for the squatter's record of one connection and fails unless it is empty.
func (s *squatter) sentNothing(t *testing.T, who string) {
	t.Helper()
	select {
	case got := <-s.received:
		if got != `""` {
			t.Errorf("%s sent the squatter %s; want nothing", who, got)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s never connected to the squatter", who)
	}
}

// TestSquattedPortNeverStopsTheAgent: uid 65534 holds the API's port when the agent starts.
// The agent stays up and takes a task; its health, read on its own socket in the data
// directory, is degraded naming the squatter's pid and uid; root's `agentd logs` and
// `agentd journal --live` aimed at the port refuse by name and send the squatter nothing (no
// header, no token); once the squatter leaves, the agent binds the port.
func TestSquattedPortNeverStopsTheAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the agent")
	}
	t.Parallel()
	sq := startSquatter(t, "127.0.0.1:0")
	pid := sq.cmd.Process.Pid
	cp := httptest.NewServer(controlplane.New("", controlplane.Faults{}).Handler())
	t.Cleanup(cp.Close)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	agent := startProc(t, "run", "--runtime", "sim", "--data-dir", data, "--backend", cp.URL, "--listen", sq.addr,
		"--log-format", "json", "--agent-id", "agent-squatted", "--cleanup-wait", "1h")
	const degraded = "the API is not listening; the agent runs on, degraded"
	warn := agent.awaitEach(t, 30*time.Second, degraded, "agent running")[degraded]
	holder := fmt.Sprintf("pid %d (uid 65534)", pid)
	if p, _ := warn["problem"].(string); !strings.Contains(p, sq.addr) || !strings.Contains(p, holder) {
		t.Errorf("the logged problem %q; want it to name %s and %s", p, sq.addr, holder)
	}

	postJSON(t, cp.URL+"/v1/tasks", map[string]any{"agent": "agent-squatted",
		"task": map[string]any{"arn": "task/while-squatted", "containers": []map[string]any{{"name": "app", "image": "web", "command": []string{"exit", "0"}}}}})
	awaitControlPlane(t, cp.URL, "task/while-squatted", "STOPPED", agent.log)

	own, base := forensics.APIClient("unix:" + filepath.Join(data, apiSocketName))
	var health struct {
		Healthy  bool
		Degraded string
	}
	resp, err := own.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("the agent's own socket: %v", err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if resp.StatusCode != 200 || !health.Healthy || !strings.Contains(health.Degraded, "api_listen") || !strings.Contains(health.Degraded, holder) {
		t.Errorf("/healthz on the socket: HTTP %d %+v; want healthy, degraded naming api_listen and %s", resp.StatusCode, health, holder)
	}

	tok := filepath.Join(dir, "api-token")
	if err := os.WriteFile(tok, []byte("secret-api-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, client := range []struct {
		name string
		args []string
	}{
		{"agentd logs", []string{"logs", "--api", "http://" + sq.addr, "--api-token-file", tok, "task/while-squatted", "app"}},
		{"agentd journal --live", []string{"journal", "dump", "--live", "http://" + sq.addr, "--api-token-file", tok}},
	} {
		out, err := exec.Command(agentdBinary(t), client.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), sq.addr) || !strings.Contains(string(out), holder) {
			t.Errorf("%s against the squatter: %v\n%s; want a refusal naming %s and %s", client.name, err, out, sq.addr, holder)
		}
		sq.sentNothing(t, client.name)
	}

	sq.leave()
	bound := agent.await(t, "API listening", 60*time.Second)
	if bound["listen"] != sq.addr {
		t.Errorf("bound %v; want %s", bound["listen"], sq.addr)
	}
	health.Degraded = ""
	if code := getJSON(t, "http://"+sq.addr+"/healthz", &health); code != 200 || health.Degraded != "" {
		t.Errorf("/healthz on the port once free: HTTP %d %+v; want healthy, not degraded", code, health)
	}
}

// awaitControlPlane waits until the control plane knows the task in the status.
func awaitControlPlane(t *testing.T, cpURL, arn, status string, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var view struct{ Tasks []cpTask }
		getJSON(t, cpURL+"/v1/tasks", &view)
		for _, task := range view.Tasks {
			if task.ARN == arn && task.Status == status {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the control plane never saw %s %s\n%s", arn, status, diag())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
