package main

import (
	"cmp"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestDockerStartTimeoutStopsTheTask runs PROTOCOL.md 1.2 §4 start_timeout_s through the agent
// on the real engine: db serves on 8080 but its health check probes port 9, so it runs and
// never turns HEALTHY; web waits for db HEALTHY. Once db's start_timeout_s has run out the
// task is STOPPED with a reason naming the dependency and the timeout, web never ran, and
// db (which did run) was stopped.
func TestDockerStartTimeoutStopsTheTask(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("Docker Engine tests: run with make test-docker")
	}
	agentID, cpURL, agent := startDockerAgent(t, "agent-late-")
	img := cmp.Or(os.Getenv("AGENTD_TESTBOX_IMAGE"), "agentd-testbox:latest")
	wrongPort := map[string]any{"command": []string{"CMD", "/testbox", "probe", "9"}, "interval_s": 1, "timeout_s": 5, "retries": 1}
	posted := time.Now()
	postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": agentID, "task": map[string]any{"arn": "task/late", "containers": []map[string]any{
		{"name": "db", "image": img, "command": []string{"serve", "8080"}, "health_check": wrongPort, "start_timeout_s": 6},
		{"name": "web", "image": img, "command": []string{"run"}, "depends_on": []map[string]any{{"container": "db", "condition": "HEALTHY"}}},
	}}})
	var task cpWorkload
	deadline := time.Now().Add(90 * time.Second)
	for getJSON(t, cpURL+"/v1/tasks/task/late", &task); task.Status != "STOPPED"; getJSON(t, cpURL+"/v1/tasks/task/late", &task) {
		if time.Now().After(deadline) {
			t.Fatalf("task/late not STOPPED within 90 s: %+v\n%s", task, agent.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(posted); took < 6*time.Second {
		t.Fatalf("task/late STOPPED %s after it was posted, before db's start_timeout_s of 6 s ran out", took)
	}
	const want = "not started: dependency db HEALTHY not met within start_timeout_s 6"
	if task.Reason != want {
		t.Fatalf("task/late STOPPED with reason %q; want %q", task.Reason, want)
	}
	if db := task.Containers["db"]; db.Status != "STOPPED" || db.Health == "HEALTHY" {
		t.Fatalf("db: %+v; want STOPPED, never HEALTHY", db)
	}
	if st := inspectState(t, agentID, "task/late", "web"); !st.StartedAt.IsZero() && st.StartedAt.Year() > 1 {
		t.Fatalf("web ran (started %s) though db never turned HEALTHY", st.StartedAt)
	}
	if st := inspectState(t, agentID, "task/late", "db"); st.StartedAt.IsZero() || st.StartedAt.Year() <= 1 {
		t.Fatalf("db never ran: the test proves nothing about a dependency that runs UNHEALTHY")
	}
	_ = agent.cmd.Process.Signal(syscall.SIGTERM)
	_ = agent.cmd.Wait()
	noViolations(t, cpURL)
}
