package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDockerStoppedMeansStopped holds the agent to DESIGN.md invariant 7 on the real engine:
// every STOPPED the control plane has accepted — of a container or of a task — is checked
// against Docker, which must have nothing of it running. The tasks are the races that broke
// it: an essential container that exits at once while its siblings are being started, and a
// task the control plane stops right after assigning it.
func TestDockerStoppedMeansStopped(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID, cpURL, agent := startDockerAgent(t, "agent-stopped-")

	img := "agentd-testbox:latest"
	var arns []string
	for i := 0; i < 6; i++ {
		arn := fmt.Sprintf("task/exit-race-%d", i)
		arns = append(arns, arn)
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn, "containers": []map[string]any{
			{"name": "app", "image": img, "command": []string{"exit", "1"}},
			{"name": "side-a", "image": img, "command": []string{"run"}, "essential": false},
			{"name": "side-b", "image": img, "command": []string{"run"}, "essential": false},
		}}})
		arn = fmt.Sprintf("task/stop-race-%d", i)
		arns = append(arns, arn)
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn, "containers": []map[string]any{
			{"name": "app", "image": img, "command": []string{"run"}},
			{"name": "side", "image": img, "command": []string{"run"}},
		}}})
		postJSON(t, cpURL+"/v1/tasks/"+arn+"/stop", nil)
	}
	running := func(arn, container string) bool {
		f := []string{"label=io.agentd.agent=" + agentID, "label=io.agentd.task-arn=" + arn, "status=running"}
		if container != "" {
			f = append(f, "label=io.agentd.container="+container)
		}
		return len(dockerPS(t, f...)) > 0
	}
	// Order of looks: the control plane's word first, then Docker — so a STOPPED accepted
	// before the look is held against what runs after it.
	check := func() (stopped int) {
		for _, arn := range arns {
			var v cpTask
			if getJSON(t, cpURL+"/v1/tasks/"+arn, &v) != 200 {
				continue
			}
			for name, c := range v.Containers {
				if c.Status == "STOPPED" && running(arn, name) {
					t.Fatalf("%s/%s is STOPPED at the control plane while Docker runs it\n%s", arn, name, agent.log())
				}
			}
			if v.Status == "STOPPED" {
				if running(arn, "") {
					t.Fatalf("%s is STOPPED at the control plane while Docker runs a container of it\n%s", arn, agent.log())
				}
				stopped++
			}
		}
		return stopped
	}
	deadline := time.Now().Add(120 * time.Second)
	for check() < len(arns) {
		if time.Now().After(deadline) {
			t.Fatalf("not every task reached STOPPED at the control plane in 2 minutes\n%s", agent.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every task stopped: nothing of this agent runs, now or after the calls still out have
	// landed (a clean stop waits for them).
	_ = agent.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- agent.cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not stop within a minute of SIGTERM\n%s", agent.log())
	}
	if left := dockerPS(t, "label=io.agentd.agent="+agentID, "status=running"); len(left) != 0 {
		t.Fatalf("%d containers run after every task was reported STOPPED", len(left))
	}
	noViolations(t, cpURL)
}

// startDockerAgent starts a reference control plane and `agentd run --runtime docker` against
// it, with a long cleanup wait so stopped containers stay to be looked at; every container of
// the agent is removed when the test ends.
func startDockerAgent(t *testing.T, prefix string) (agentID, cpURL string, agent *proc) {
	t.Helper()
	agentID = strings.ReplaceAll(prefix+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL = "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agent = startProc(t, "run", "--runtime", "docker", "--data-dir", filepath.Join(t.TempDir(), "data"), "--backend", cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "10m", "--log-format", "json", "--agent-id", agentID)
	agent.await(t, "agent running", 60*time.Second)
	return agentID, cpURL, agent
}
