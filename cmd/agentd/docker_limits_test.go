package main

import (
	"cmp"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDockerOOMKillAndStopTimeoutThroughTheAgent: through the agent, on whichever engine
// DOCKER_HOST names (make test-docker, make test-podman), a container killed over its memory
// limit is reported STOPPED with the OutOfMemory reason, and a stop honours each container's
// stop_timeout_s: one with 30 s outlasts a 12 s linger (exit 0, where the agent's own 10 s would
// kill it), one with 1 s kills a 30 s linger (137), and one without any is ended by its SIGTERM
// (143, not killed at once: Podman reports "none" as 0).
func TestDockerOOMKillAndStopTimeoutThroughTheAgent(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID, cpURL, agent := startDockerAgent(t, "agent-limits-")
	img := cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest")
	task := func(arn string, c map[string]any) {
		c["name"], c["image"] = "app", img
		postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": arn, "containers": []map[string]any{c}}})
	}
	task("task/l-oom", map[string]any{"command": []string{"alloc", "256"}, "memory_mib": 32})
	stops := []struct {
		arn  string
		spec map[string]any
		want int
	}{
		{"task/l-patient", map[string]any{"command": []string{"linger", "12s"}, "stop_timeout_s": 30}, 0},
		{"task/l-hasty", map[string]any{"command": []string{"linger", "30s"}, "stop_timeout_s": 1}, 137},
		{"task/l-plain", map[string]any{"command": []string{"run"}}, 143},
	}
	for _, s := range stops {
		task(s.arn, s.spec)
	}
	await := func(arn, what string, ok func(w cpStopped) bool) cpStopped {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var w cpStopped
			getJSON(t, cpURL+"/v1/tasks/"+arn, &w)
			if ok(w) {
				return w
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: not within 90 s (%+v)\n%s", arn, what, w, agent.log())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	oom := await("task/l-oom", "STOPPED", func(w cpStopped) bool { return w.Status == "STOPPED" })
	if c := oom.Containers["app"]; !strings.Contains(oom.Reason, "OutOfMemory") || c.ExitCode == nil || *c.ExitCode != 137 {
		t.Errorf("256 MiB under a 32 MiB limit: STOPPED %q, exit %v; want the OutOfMemory reason and 137", oom.Reason, c.ExitCode)
	}
	for _, s := range stops {
		await(s.arn, "RUNNING", func(w cpStopped) bool { return w.Status == "RUNNING" })
		ids := dockerPS(t, "label=io.agentd.agent="+agentID, "label=io.agentd.task-arn="+s.arn)
		if len(ids) != 1 {
			t.Fatalf("%s: %d containers", s.arn, len(ids))
		}
		awaitOutput(t, ids[0], "testbox:") // its signal handlers are set
		postJSON(t, cpURL+"/v1/tasks/"+s.arn+"/stop", nil)
	}
	for _, s := range stops {
		w := await(s.arn, "STOPPED", func(w cpStopped) bool { return w.Status == "STOPPED" })
		if c := w.Containers["app"]; c.ExitCode == nil || *c.ExitCode != s.want {
			t.Errorf("%s (%v): stopped with exit %v; want %d", s.arn, s.spec, c.ExitCode, s.want)
		}
	}
}

// cpStopped is the control plane's view of a task with its containers' exit codes.
type cpStopped struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Containers map[string]struct {
		ExitCode *int `json:"exit_code"`
	} `json:"containers"`
}

// awaitOutput waits, bounded, until the container has written want.
func awaitOutput(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := exec.Command("docker", "logs", id).CombinedOutput()
		if strings.Contains(string(out), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not write %q in 30 s: %q", id, want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
