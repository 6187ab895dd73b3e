package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func dockerPS(t *testing.T, filters ...string) []string {
	t.Helper()
	args := []string{"ps", "-aq"}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Fatalf("docker ps: %v", err)
	}
	return strings.Fields(string(out))
}

func removeLabelled(label string) {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+label).Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "rm", "-f", "-v", id).Run()
	}
}

// TestDockerAgentEndToEnd runs `agentd run --runtime docker` against a throttled control plane
// on this machine's Docker Engine: exit codes, a stop by desired status, an essential exit
// stopping its sidecar, a missing image; no container removed before its task's STOPPED is
// acknowledged; a kill -9 while containers run, an exit while the agent is down reported with
// its code after the restart; containers of another agent never touched; nothing left behind.
func TestDockerAgentEndToEnd(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID := strings.ReplaceAll("agent-dockere2e-"+time.Now().Format("150405.000"), ".", "")
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + agentID) })
	bystander := startBystander(t, agentID)
	w := startThrottledDockerWorld(t, agentID)
	tasks := dockerEndToEndTasks("agentd-testbox:latest")
	for arn, task := range tasks {
		task["arn"] = arn
		postJSON(t, w.cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": task})
	}
	// The guard under throttling (guardCheck, container_docker_test.go); api changes with
	// each start of the agent.
	guard := cleanupGuard(t, w.cpURL, w.api)
	checkGuard := func() { guard.api = w.api; guard.check() }
	w.killWhileSleepRuns(t, checkGuard)
	w.start(t)
	postJSON(t, w.cpURL+"/v1/tasks/task/d-run/stop", nil)
	// Everything ends cleaned, every container removed — only after its acknowledgement.
	awaitSettled(t, w.cpURL, w.api, len(tasks), 120*time.Second, w.agent.log, checkGuard)
	if !guard.sawBlocked {
		t.Fatal("no task was ever seen stopped, unacknowledged and with its containers: the guard check above proved nothing")
	}
	checkDockerEndToEndOutcomes(t, w.cpURL)
	noViolations(t, w.cpURL)
	if left := dockerPS(t, "label=io.agentd.agent="+agentID); len(left) != 0 {
		t.Fatalf("containers left behind: %v", left)
	}
	if len(dockerPS(t, "label=io.agentd.agent="+bystander, "status=running")) != 1 {
		t.Fatal("the other agent's container was touched")
	}
}

// dockerEndToEndTasks: an exit with a code, a sleep that exits (code 7) while the agent is
// down, a long runner the control plane stops, an essential exit stopping its sidecar, and
// a missing image.
func dockerEndToEndTasks(img string) map[string]map[string]any {
	return map[string]map[string]any{
		"task/d-exit":  {"containers": []map[string]any{{"name": "app", "image": img, "command": []string{"exit", "3"}}}},
		"task/d-sleep": {"containers": []map[string]any{{"name": "app", "image": img, "command": []string{"sleep", "4s", "7"}}}},
		"task/d-run":   {"containers": []map[string]any{{"name": "app", "image": img, "command": []string{"run"}}}},
		"task/d-pair": {"containers": []map[string]any{{"name": "app", "image": img, "command": []string{"sleep", "1s", "0"}},
			{"name": "sidecar", "image": img, "command": []string{"run"}, "essential": false}}},
		"task/d-missing": {"containers": []map[string]any{{"name": "app", "image": "agentd-test/missing:1"}}},
	}
}

// startBystander runs another agent's container on the same engine, which the agent must
// never touch; it returns that agent's id.
func startBystander(t *testing.T, agentID string) string {
	t.Helper()
	other := "agent-bystander-" + agentID
	t.Cleanup(func() { removeLabelled("io.agentd.agent=" + other) })
	if out, err := exec.Command("docker", "run", "-d", "--label", "io.agentd.agent="+other, "--label", "io.agentd.task-arn=task/d-exit", "--label", "io.agentd.container=app", "agentd-testbox:latest", "run").CombinedOutput(); err != nil {
		t.Fatalf("bystander: %v %s", err, out)
	}
	return other
}

// throttledDockerWorld is a control plane throttling to one report in two seconds and the
// agent on the Docker Engine reporting to it.
type throttledDockerWorld struct {
	cpURL, api, data, agentID string
	agent                     *proc
}

func startThrottledDockerWorld(t *testing.T, agentID string) *throttledDockerWorld {
	t.Helper()
	cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json", "--throttle-rps", "0.5", "--throttle-burst", "1")
	w := &throttledDockerWorld{
		cpURL:   "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string),
		data:    filepath.Join(t.TempDir(), "data"),
		agentID: agentID,
	}
	w.start(t)
	return w
}

func (w *throttledDockerWorld) start(t *testing.T) {
	t.Helper()
	w.agent = startProc(t, "run", "--runtime", "docker", "--data-dir", w.data, "--backend", w.cpURL,
		"--listen", "127.0.0.1:0", "--cleanup-wait", "1s", "--log-format", "json", "--agent-id", w.agentID)
	w.api = "http://" + w.agent.await(t, "agent running", 60*time.Second)["listen"].(string)
}

// killWhileSleepRuns kills the agent while task/d-sleep and task/d-run run: the workload
// keeps running, and d-sleep's container exits while the agent is down.
func (w *throttledDockerWorld) killWhileSleepRuns(t *testing.T, during func()) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		sleeping := dockerPS(t, "label=io.agentd.agent="+w.agentID, "label=io.agentd.task-arn=task/d-sleep", "status=running")
		running := dockerPS(t, "label=io.agentd.agent="+w.agentID, "label=io.agentd.task-arn=task/d-run", "status=running")
		if len(sleeping) == 1 && len(running) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task/d-sleep never ran:\n%s", w.agent.log())
		}
		during()
		time.Sleep(50 * time.Millisecond)
	}
	w.agent.kill()
	if len(dockerPS(t, "label=io.agentd.agent="+w.agentID, "label=io.agentd.task-arn=task/d-run", "status=running")) != 1 {
		t.Fatal("a kill -9 of the agent stopped the workload")
	}
	for len(dockerPS(t, "label=io.agentd.agent="+w.agentID, "label=io.agentd.task-arn=task/d-sleep", "status=exited")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("task/d-sleep's container did not exit while the agent was down")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkDockerEndToEndOutcomes: each container reported STOPPED with its exit code — the one
// that exited while the agent was down too, a stopped one with 143 — and the missing image
// STOPPED without one, its reason naming the pull.
func checkDockerEndToEndOutcomes(t *testing.T, cpURL string) {
	t.Helper()
	var view struct{ Tasks []cpTask }
	getJSON(t, cpURL+"/v1/tasks", &view)
	want := map[string]map[string]int{"task/d-exit": {"app": 3}, "task/d-sleep": {"app": 7}, "task/d-run": {"app": 143}, "task/d-pair": {"app": 0, "sidecar": 143}}
	for _, v := range view.Tasks {
		for name, code := range want[v.ARN] {
			c := v.Containers[name]
			if c.Status != "STOPPED" || c.ExitCode == nil || *c.ExitCode != code {
				t.Errorf("%s/%s: %+v; want STOPPED with exit code %d", v.ARN, name, c, code)
			}
		}
		if v.ARN == "task/d-missing" {
			if c := v.Containers["app"]; c.Status != "STOPPED" || c.ExitCode != nil {
				t.Errorf("missing image: %+v; want STOPPED without an exit code", c)
			}
		}
	}
	var missing cpTask
	getJSON(t, cpURL+"/v1/tasks/task/d-missing", &missing)
	if !strings.Contains(missing.Reason, "pull failed: pull agentd-test/missing:1") {
		t.Errorf("the missing image's STOPPED reason %q does not name the pull", missing.Reason)
	}
}
