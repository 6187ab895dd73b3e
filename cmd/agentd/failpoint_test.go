package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/simruntime"
)

// TestFailpoints drives a real agent to each named crash point, where it SIGKILLs itself,
// restarts it, and checks that everything still ends cleaned, that the journal verifies, that
// the control plane saw no violation and that no container was created twice.
func TestFailpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	t.Parallel()
	points := []string{
		"journal-after-commit@5",
		"engine-after-commit-before-apply@7",
		"engine-after-apply-before-runtime-call@2",
		"runtime-after-create-before-journal",
		"report-after-send-before-journal",
		"cleanup-between-removals",
		"snapshot",
		"compaction",
	}
	bin := buildAgentd(t, "failpoints")
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			t.Parallel() // each point has its own control plane, agent, data dir and ports
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			cp := startProc(t, "controlplane", "--listen", "127.0.0.1:0", "--log-format", "json", "--throttle-rps", "20")
			cpURL := "http://" + cp.await(t, "reference control plane serving (development and test tool, in memory)", 30*time.Second)["listen"].(string)
			args := []string{"run", "--runtime", "sim", "--data-dir", data, "--backend", cpURL, "--listen", "127.0.0.1:0",
				"--cleanup-wait", "200ms", "--log-format", "json", "--agent-id", "agent-fp", "--snapshot-every", "25", "--retention", "300ms"}
			crashing := exec.Command(bin, args...)
			crashing.Env = append(os.Environ(), "AGENTD_FAILPOINT="+point)
			var stderr strings.Builder
			crashing.Stderr = &stderr
			if err := crashing.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- crashing.Wait() }()
			// Work that reaches every point: tasks with two containers each, that exit and
			// are cleaned up. (The control plane queues them until the agent polls.)
			tasks := 4
			if strings.HasPrefix(point, "compaction") {
				tasks = 12 // tasks cleaned long enough ago, then records enough for a snapshot
			}
			for i := 0; i < tasks; i++ {
				if i == 4 {
					time.Sleep(2 * time.Second)
				}
				postJSON(t, cpURL+"/v1/tasks", map[string]any{"agent": "agent-fp", "task": map[string]any{"arn": fmt.Sprintf("task/fp-%d", i),
					"containers": []map[string]any{{"name": "app", "image": "web:1", "command": []string{"sleep", "300ms", "3"}},
						{"name": "side", "image": "web:1", "command": []string{"run"}}}}})
			}
			select {
			case err := <-done:
				ws, _ := crashing.ProcessState.Sys().(syscall.WaitStatus)
				if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("the agent did not die at %s: %v\n%s", point, err, stderr.String())
				}
			case <-time.After(60 * time.Second):
				_ = crashing.Process.Kill()
				t.Fatalf("the agent never reached %s\n%s", point, stderr.String())
			}
			_, api := startAgentProc(t, data, cpURL, "--agent-id", "agent-fp", "--cleanup-wait", "200ms")
			awaitSettled(t, cpURL, api, tasks, 60*time.Second, func() string { return "after the crash at " + point })
			noViolations(t, cpURL)
			copyPath := filepath.Join(dir, "copy.db")
			if out, err := exec.Command(bin, "journal", "export", "--live", api, "--out", copyPath).CombinedOutput(); err != nil {
				t.Fatalf("export: %v\n%s", err, out)
			}
			if out, err := exec.Command(bin, "journal", "verify", "--file", copyPath).CombinedOutput(); err != nil {
				t.Fatalf("verify after the crash at %s: %v\n%s", point, err, out)
			}
			made, _, err := simruntime.Stats(data)
			if err != nil || made != int64(2*tasks) {
				t.Fatalf("after the crash at %s the runtime created %d containers (%v); want %d", point, made, err, 2*tasks)
			}
		})
	}
}
