package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/runtime"
)

// TestDockerNameCollisionFailsOneTask: a container not the agent's holds the very name the agent
// will give a task's container (forced: the name computed and taken before the task arrives).
// That task — and only it — stops, its reason naming the container that holds the name; the
// holder is left running as it was; another task runs; and /healthz stays 200 throughout, since
// the engine answered (the agent took the conflict for an unavailable runtime before: the task
// stayed PULLED for ever and /healthz answered 503 for the whole agent).
func TestDockerNameCollisionFailsOneTask(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll("agent-names-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	squatted := runtime.Name(agentID, "task/squatted", "app")
	out, err := exec.Command("docker", "run", "-d", "--name", squatted, "agentd-testbox:latest", "run").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run --name %s: %v: %s", squatted, err, out)
	}
	holder := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", "-v", holder).Run() })

	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json")
	cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
	agent := startProc(t, "run", "--runtime", "docker", "--data-dir", filepath.Join(t.TempDir(), "data"), "--backend", cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "10m", "--log-format", "json", "--agent-id", agentID)
	api := "http://" + agent.await(t, "agent running", 60*time.Second)["listen"].(string)
	for _, arn := range []string{"task/squatted", "task/fine"} {
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn,
			"containers": []map[string]any{{"name": "app", "image": "agentd-testbox:latest", "command": []string{"run"}}}}})
	}
	deadline := time.Now().Add(90 * time.Second)
	var squat, fine cpWorkload
	for {
		if code := getJSON(t, api+"/healthz", nil); code != http.StatusOK {
			t.Fatalf("/healthz answered %d while a task's name was taken: one task must not make the agent unhealthy\n%s", code, agent.log())
		}
		getJSON(t, cpURL+"/v1/tasks/task/squatted", &squat)
		getJSON(t, cpURL+"/v1/tasks/task/fine", &fine)
		if squat.Status == "STOPPED" && fine.Status == "RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 90 s: task/squatted %+v, task/fine %+v\n%s", squat, fine, agent.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(squat.Reason, holder[:12]) || !strings.Contains(squat.Reason, squatted) {
		t.Fatalf("task/squatted stopped with reason %q: it must name the container %s that holds %s", squat.Reason, holder[:12], squatted)
	}
	t.Logf("task/squatted stopped: %s", squat.Reason)
	if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", holder).Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("the holder of the name is not running as it was: %q, %v", out, err)
	}
	if code := getJSON(t, api+"/healthz", nil); code != http.StatusOK {
		t.Fatalf("/healthz answered %d after the task stopped", code)
	}
	noViolations(t, cpURL)
}
