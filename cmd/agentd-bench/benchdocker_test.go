package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/benchmark"
)

// The Docker benchmark runs both sides to the end on the real engine, cleans up after itself,
// and measures the agent's process. Its figures are not judged here (a shared machine's
// engine is too noisy for that); `make bench` judges them.
func TestDockerBenchRunsBothSides(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("AGENTD_DOCKER_TESTS=1 runs the Docker tests (make test-docker)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := benchmark.Docker(ctx, benchmark.DockerOptions{Agentd: agentdBinary(t), Dir: t.TempDir(),
		Image: "agentd-testbox:latest", Tasks: 8, Concurrency: 4, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks != 8 || res.BareSeconds <= 0 || res.AgentSeconds <= 0 || res.AgentCPUPer1k <= 0 || res.AgentPeakMB <= 0 {
		t.Fatalf("implausible: %+v", res)
	}
	// Counted at the engine's door: the bare loop's create, start, wait and remove, and the
	// agent no more for a task without ports (an inspect after each start would make it 5).
	if res.BareCalls.PerTask != 4 {
		t.Fatalf("bare loop: %.2f calls a task (%s), want create, start, wait, remove", res.BareCalls.PerTask, res.BareCalls)
	}
	if res.AgentCalls.PerTask <= 0 || res.AgentCalls.PerTask > res.BareCalls.PerTask {
		t.Fatalf("agentd: %.2f calls a task (%s), want at most the bare loop's %.0f", res.AgentCalls.PerTask, res.AgentCalls, res.BareCalls.PerTask)
	}
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=io.agentd.bench", "--format", "{{.Names}}").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("containers left behind: %q %v", out, err)
	}
}

// With --agent-image the benchmark runs the agent a second way, as a container of that image
// (README "As a container"), as a side of its own: its rows come from its cgroup, and neither
// its container nor its data dir outlives the run.
func TestDockerBenchRunsTheAgentsImage(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("AGENTD_DOCKER_TESTS=1 runs the Docker tests (make test-docker)")
	}
	image := agentImage(t, fmt.Sprintf("bench-%d", time.Now().UnixNano()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	res, err := benchmark.Docker(ctx, benchmark.DockerOptions{Agentd: agentdBinary(t), Dir: dir,
		Image: "agentd-testbox:latest", Tasks: 4, Concurrency: 2, Rounds: 2, AgentImage: image})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentImage != image || res.ContainerSeconds <= 0 || res.ContainerCPUPer1k <= 0 || res.ContainerPeakMemMB <= 0 ||
		res.AgentSeconds <= 0 || res.AgentCPUPer1k <= 0 || res.AgentPeakMB <= 0 {
		t.Fatalf("a side has no figures: %+v", res)
	}
	if rows := dockerRows(res); len(rows) != 7 || !strings.Contains(rows[4].Figure, image) {
		t.Fatalf("the container's rows are not beside the process's: %+v", rows)
	}
	assertBenchLeftNothing(t, dir)
}

// An agent's container that fails (here an image that is no agent: it exits at once) fails
// the benchmark with its log, and is removed all the same, with its data dir.
func TestDockerBenchRemovesAFailedAgentContainer(t *testing.T) {
	if os.Getenv("AGENTD_DOCKER_TESTS") != "1" {
		t.Skip("AGENTD_DOCKER_TESTS=1 runs the Docker tests (make test-docker)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	_, err := benchmark.Docker(ctx, benchmark.DockerOptions{Agentd: agentdBinary(t), Dir: dir,
		Image: "agentd-testbox:latest", Tasks: 2, Concurrency: 1, Rounds: 1, AgentImage: "agentd-testbox:latest"})
	if err == nil || !strings.Contains(err.Error(), "exited early") {
		t.Fatalf("want the agent's container to end the run early, got %v", err)
	}
	assertBenchLeftNothing(t, dir)
}

// assertBenchLeftNothing: no container of the benchmark's (bare loop, tasks, the agent's own)
// and no data dir left.
func assertBenchLeftNothing(t *testing.T, dir string) {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=io.agentd.bench", "--format", "{{.Names}}").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("containers left behind: %q %v", out, err)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("data dirs left behind in %s: %v %v", dir, left, err)
	}
}
